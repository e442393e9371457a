"""Embeddings from an OpenAI-compatible ``POST {base_url}/embeddings`` endpoint.

Requests are ``{"model", "input": [...]}`` (plus ``dimensions`` when configured) in
batches; the answer's ``data[i].embedding`` rows are put back in input order by their
``index`` and L2-normalised, so a dot product is the cosine as with the local
embedders. Failures go through the provider resilience helpers: 429, 5xx, timeouts and
connection errors are retried with backoff and counted by a circuit breaker that then
fails fast; anything else (401, a wrong model, a malformed answer) fails at once. Every
failure is a ``PalyraError`` (``PROVIDER_UNAVAILABLE`` or ``CONFIG_INVALID`` ...), which
:class:`palyra.memory.service.Memory` turns into "indexed without a vector for now".

``aembed`` is what the daemon uses (it never blocks the event loop); ``embed`` is the
blocking form for synchronous callers and makes one attempt only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import numpy as np

from palyra.core.errors import ErrorCode, PalyraError
from palyra.memory.config import OpenAIEmbeddingsConfig
from palyra.memory.embed import Vectors, normalise
from palyra.providers.resilience import (
    CircuitBreaker,
    ProviderFailure,
    RetryPolicy,
    failure_for_status,
)


class OpenAIEmbedder:
    """An :class:`palyra.memory.embed.Embedder` over an OpenAI-compatible endpoint."""

    remote = True

    def __init__(self, config: OpenAIEmbeddingsConfig, api_key: str = "", *,
                 clock: Callable[[], float] = time.monotonic,
                 retry: RetryPolicy | None = None) -> None:
        self.config = config
        self.name = f"openai:{config.model}"
        self.dim = config.dimensions  # 0 until the first answer says
        self._url = config.base_url.rstrip("/") + "/embeddings"
        self._headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._retry = retry or RetryPolicy(max_retries=config.max_retries, base_delay_s=0.25,
                                           max_delay_s=4.0)
        self.breaker = CircuitBreaker(f"embeddings {config.model}", clock=clock)
        self._client: httpx.AsyncClient | None = None

    def _body(self, texts: Sequence[str]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.config.model, "input": list(texts)}
        if self.config.dimensions:
            body["dimensions"] = self.config.dimensions
        return body

    def _parse(self, response: httpx.Response, count: int) -> Vectors:
        if response.status_code != 200:
            raise failure_for_status(response.status_code, response.text,
                                     response.headers.get("retry-after"))
        try:
            data = response.json()["data"]
            rows = sorted(data, key=lambda d: int(d["index"]))
            matrix = np.asarray([row["embedding"] for row in rows], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise ProviderFailure(f"malformed embeddings answer: {exc}",
                                  code=ErrorCode.PROVIDER_UNAVAILABLE, transient=False) from None
        if matrix.ndim != 2 or len(matrix) != count:
            raise ProviderFailure(f"asked for {count} embeddings, got {len(matrix)}",
                                  code=ErrorCode.PROVIDER_UNAVAILABLE, transient=False)
        if not self.dim:
            self.dim = int(matrix.shape[1])
        if matrix.shape[1] != self.dim:
            raise ProviderFailure(
                f"embedding of dimension {matrix.shape[1]}, expected {self.dim} (a model "
                "change needs a restart, which re-embeds every item)",
                code=ErrorCode.CONFIG_INVALID, transient=False)
        return normalise(matrix)

    def _batches(self, texts: Sequence[str]) -> list[Sequence[str]]:
        size = self.config.batch_size
        return [texts[i:i + size] for i in range(0, len(texts), size)]

    def _empty(self) -> Vectors:
        return np.zeros((0, max(self.dim, 1)), dtype=np.float32)

    async def aembed(self, texts: Sequence[str]) -> Vectors:
        """One unit row per text, without blocking the event loop.

        Raises:
            PalyraError: The endpoint failed (after retries) or its breaker is open.
        """
        if not texts:
            return self._empty()
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.config.timeout_s)
        client = self._client
        parts = []
        for batch in self._batches(texts):
            body = self._body(batch)

            async def post(body: dict[str, Any] = body, n: int = len(batch)) -> Vectors:
                try:
                    response = await client.post(self._url, json=body, headers=self._headers)
                except httpx.HTTPError as exc:
                    raise _transport_failure(exc) from None
                return self._parse(response, n)

            parts.append(await self._call(post))
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    async def _call(self, post: Callable[[], Any]) -> Vectors:
        self.breaker.check()
        attempt = 0
        while True:
            try:
                vectors: Vectors = await post()
            except ProviderFailure as failure:
                if failure.transient and attempt < self._retry.max_retries:
                    await self._retry.sleep(attempt, failure.retry_after_s)
                    attempt += 1
                    continue
                if failure.transient:
                    self.breaker.record_failure()
                else:
                    self.breaker.release()
                raise failure.to_error("embeddings", attempt + 1) from None
            except BaseException:
                self.breaker.release()
                raise
            self.breaker.record_success()
            return vectors

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One unit row per text: blocking, one attempt (for synchronous callers).

        Raises:
            PalyraError: The endpoint failed or its breaker is open.
        """
        if not texts:
            return self._empty()
        self.breaker.check()
        parts = []
        try:
            with httpx.Client(timeout=self.config.timeout_s) as client:
                for batch in self._batches(texts):
                    try:
                        response = client.post(self._url, json=self._body(batch),
                                               headers=self._headers)
                    except httpx.HTTPError as exc:
                        raise _transport_failure(exc) from None
                    parts.append(self._parse(response, len(batch)))
        except ProviderFailure as failure:
            if failure.transient:
                self.breaker.record_failure()
            else:
                self.breaker.release()
            raise failure.to_error("embeddings", 1) from None
        self.breaker.record_success()
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    async def aclose(self) -> None:
        """Close the HTTP client."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _transport_failure(exc: httpx.HTTPError) -> ProviderFailure:
    kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "connection failed"
    return ProviderFailure(f"{kind}: {type(exc).__name__}: {exc}",
                           code=ErrorCode.PROVIDER_UNAVAILABLE, transient=True)


def api_key_from(config: OpenAIEmbeddingsConfig, env: dict[str, str] | Any) -> str:
    """The bearer key from ``env[config.api_key_env]`` ("" when none is configured).

    Raises:
        PalyraError: ``CONFIG_INVALID`` when the named variable is unset or empty.
    """
    if not config.api_key_env:
        return ""
    key = str(env.get(config.api_key_env, ""))
    if not key:
        raise PalyraError(
            f"memory.openai.api_key_env names {config.api_key_env}, which is not set "
            "(set it, or set api_key_env = \"\" for an endpoint without a key)",
            code=ErrorCode.CONFIG_INVALID, details={"setting": "memory.openai.api_key_env"})
    return key
