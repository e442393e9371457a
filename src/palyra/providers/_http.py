"""Shared plumbing of the HTTP providers: client, retries, breaker, SSE.

Subclasses only say how to build the vendor request and how to decode the
vendor's event stream; everything about failure handling lives here, once.
"""

from __future__ import annotations

import abc
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

import httpx
import msgspec

from palyra.core.errors import ErrorCode, PalyraError
from palyra.providers._config import ProviderConfig
from palyra.providers._sse import SseEvent, iter_sse
from palyra.providers._types import (
    Completed,
    ModelRequest,
    ModelResponse,
    ProviderChunk,
    collect_response,
)
from palyra.providers.resilience import (
    CircuitBreaker,
    ProviderFailure,
    RetryPolicy,
    failure_for_status,
)


def parse_arguments(raw: str) -> dict[str, Any]:
    """Decode a tool call's streamed argument JSON.

    An empty string is ``{}``. Anything that is not a JSON object becomes
    ``{"_raw_arguments": raw}``, which no tool accepts, so the model gets a
    readable validation error instead of the run crashing.
    """
    if not raw.strip():
        return {}
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return {"_raw_arguments": raw}
    return value if isinstance(value, dict) else {"_raw_arguments": raw}


def decode_event(event: SseEvent) -> dict[str, Any]:
    """Decode one SSE data payload as a JSON object.

    Raises:
        ProviderFailure: If the payload is not a JSON object (transient: a
            garbled stream may well succeed on retry).
    """
    try:
        value = msgspec.json.decode(event.data)
    except msgspec.DecodeError as exc:
        raise ProviderFailure(
            f"malformed stream event: {event.data[:200]!r}",
            code=ErrorCode.PROVIDER_UNAVAILABLE,
            transient=True,
        ) from exc
    if not isinstance(value, dict):
        raise ProviderFailure(
            f"unexpected stream event: {event.data[:200]!r}",
            code=ErrorCode.PROVIDER_UNAVAILABLE,
            transient=True,
        )
    return value


def stream_ended_early() -> ProviderFailure:
    """The failure for a stream that closed before its final event."""
    return ProviderFailure(
        "stream ended before the response was complete",
        code=ErrorCode.PROVIDER_UNAVAILABLE,
        transient=True,
    )


class HttpProvider(abc.ABC):
    """Base of the OpenAI-compatible and Anthropic providers.

    Args:
        config: Provider configuration (URL, key variable, timeouts, retries,
            breaker).
        client: An ``httpx.AsyncClient`` to use; by default the provider owns
            one and closes it in ``aclose``.
        clock: Monotonic clock for the circuit breaker (tests inject one).

    Raises:
        PalyraError: ``CONFIG_INVALID`` if ``api_key_env`` names an unset
            environment variable.
    """

    default_base_url: str = ""

    def __init__(
        self,
        config: ProviderConfig,
        *,
        client: httpx.AsyncClient | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._api_key = ""
        if config.api_key_env:
            key = os.environ.get(config.api_key_env, "")
            if not key:
                raise PalyraError(
                    f"{self.name} provider: environment variable {config.api_key_env} "
                    "(provider.api_key_env) is not set",
                    code=ErrorCode.CONFIG_INVALID,
                )
            self._api_key = key
        self._base_url = (config.base_url or self.default_base_url).rstrip("/")
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(config.timeout_s, connect=config.connect_timeout_s)
        )
        self._retry = RetryPolicy(config.max_retries, config.backoff_base_s, config.backoff_max_s)
        self._breaker = CircuitBreaker(
            self.name,
            failure_threshold=config.breaker_failure_threshold,
            reset_after_s=config.breaker_reset_s,
            clock=clock,
        )

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """Provider kind."""

    @property
    def breaker(self) -> CircuitBreaker:
        """The provider's circuit breaker (exposed for status and tests)."""
        return self._breaker

    @abc.abstractmethod
    def _path(self) -> str:
        """Request path below the base URL."""

    @abc.abstractmethod
    def _headers(self) -> dict[str, str]:
        """Vendor headers, including authentication."""

    @abc.abstractmethod
    def _body(self, request: ModelRequest) -> dict[str, Any]:
        """The vendor request body (always with streaming on)."""

    @abc.abstractmethod
    def _decode(self, events: AsyncIterator[SseEvent]) -> AsyncGenerator[ProviderChunk, None]:
        """Turn vendor events into chunks, ending with ``Completed``.

        Raises ``ProviderFailure`` for vendor error events and early ends.
        """

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ProviderChunk, None]:
        """Stream one model call, retrying transient failures before any output.

        Once a chunk has reached the caller, a failure is raised as is: a retry
        would repeat text the caller already showed.
        """
        self._breaker.check()
        url = self._base_url + self._path()
        body = self._body(request)
        headers = self._headers()
        attempt = 0
        try:
            while True:
                started = False
                try:
                    async with self._client.stream(
                        "POST", url, json=body, headers=headers
                    ) as response:
                        if response.status_code >= 400:
                            text = (await response.aread()).decode("utf-8", "replace")
                            raise failure_for_status(
                                response.status_code, text, response.headers.get("retry-after")
                            )
                        events = iter_sse(response.aiter_lines())
                        async with aclosing(self._decode(events)) as chunks:
                            async for chunk in chunks:
                                started = True
                                if isinstance(chunk, Completed):
                                    # Record before yielding: callers usually
                                    # stop iterating at Completed, closing us.
                                    self._breaker.record_success()
                                    yield chunk
                                    return
                                yield chunk
                            raise stream_ended_early()
                except (ProviderFailure, httpx.HTTPError) as exc:
                    failure = _as_failure(exc)
                    if failure.transient and not started and attempt < self._retry.max_retries:
                        await self._retry.sleep(attempt, failure.retry_after_s)
                        attempt += 1
                        continue
                    if failure.transient:
                        self._breaker.record_failure()
                    else:
                        self._breaker.release()
                    raise failure.to_error(self.name, attempt + 1) from exc
        except BaseException:
            # Cancellation, GeneratorExit or a PalyraError raised above: free a
            # half-open trial slot without counting (record_* already ran for
            # the counted cases, and release() after them is a no-op).
            self._breaker.release()
            raise

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Run ``stream`` to the end and return the final response."""
        return await collect_response(self.stream(request))

    async def aclose(self) -> None:
        """Close the HTTP client if this provider created it."""
        if self._owns_client:
            await self._client.aclose()


def _as_failure(exc: ProviderFailure | httpx.HTTPError) -> ProviderFailure:
    if isinstance(exc, ProviderFailure):
        return exc
    if isinstance(exc, httpx.TimeoutException):
        return ProviderFailure(
            f"timed out ({type(exc).__name__})", code=ErrorCode.DEADLINE_EXCEEDED, transient=True
        )
    return ProviderFailure(
        f"transport error ({type(exc).__name__}: {exc})",
        code=ErrorCode.PROVIDER_UNAVAILABLE,
        transient=True,
    )
