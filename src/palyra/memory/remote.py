"""Embeddings from an OpenAI-compatible ``POST {base_url}/embeddings`` endpoint.

Requests are ``{"model", "input": [...]}`` (plus ``dimensions`` when configured) in
batches; the answer's ``data[i].embedding`` rows are put back in input order by their
``index`` and L2-normalised, so a dot product is the cosine as with the local
embedders. 429, 5xx, timeouts and connection errors are retried with exponential
backoff and jitter (a ``Retry-After`` wins, capped) and counted by a circuit breaker
that then fails fast for ``BREAKER_RESET_S`` before letting one trial through;
anything else (401, a wrong model, a malformed answer) fails at once. The same rules
as ``palyra.providers.resilience``, kept here because memory sits below the providers
in the layering (tests/unit/test_layering.py). Every failure is a ``PalyraError``
(``PROVIDER_UNAVAILABLE``, ``CONFIG_INVALID`` ...), which
:class:`palyra.memory.service.Memory` turns into "indexed without a vector for now".

``aembed`` is what the daemon uses (it never blocks the event loop); ``embed`` is the
blocking form for synchronous callers and makes one attempt only.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import httpx

from palyra.core.errors import ErrorCode, PalyraError
from palyra.memory.config import OpenAIEmbeddingsConfig
from palyra.memory.embed import normalise

if TYPE_CHECKING:
    from palyra.memory.embed import Vectors

BREAKER_FAILURES = 3  # consecutive failed calls that open the breaker
BREAKER_RESET_S = 30.0
MAX_DELAY_S = 4.0


class _Failure(Exception):
    """One failed attempt: what to tell the caller, and whether a retry may help."""

    def __init__(self, message: str, code: ErrorCode, *, transient: bool,
                 retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.message, self.code = message, code
        self.transient, self.retry_after_s = transient, retry_after_s

    def error(self, attempts: int) -> PalyraError:
        suffix = f" after {attempts} attempts" if attempts > 1 else ""
        return PalyraError(f"embeddings endpoint: {self.message}{suffix}", code=self.code,
                           details={"attempts": str(attempts)})


def _status_failure(response: httpx.Response) -> _Failure:
    snippet = response.text[:300]
    status = response.status_code
    if status == 429 or status >= 500:
        retry_after: float | None = None
        try:
            retry_after = float(response.headers.get("retry-after", ""))
        except ValueError:
            retry_after = None
        code = ErrorCode.RESOURCE_EXHAUSTED if status == 429 else ErrorCode.PROVIDER_UNAVAILABLE
        return _Failure(f"HTTP {status}: {snippet}", code, transient=True,
                        retry_after_s=retry_after)
    code = ErrorCode.CONFIG_INVALID if status in (401, 403, 404) else ErrorCode.INVALID_ARGUMENT
    return _Failure(f"request rejected (HTTP {status}): {snippet}", code, transient=False)


class _Breaker:
    """Fails fast after ``BREAKER_FAILURES`` consecutive failed calls; one trial call
    goes through after ``BREAKER_RESET_S``."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None

    def check(self) -> None:
        if self._opened_at is None:
            return
        waited = self._clock() - self._opened_at
        if waited >= BREAKER_RESET_S:
            self._opened_at = self._clock()  # this call is the trial; others wait again
            return
        raise PalyraError(
            f"embeddings endpoint circuit breaker is open after {self._failures} consecutive "
            f"failures; retry in {BREAKER_RESET_S - waited:.1f}s",
            code=ErrorCode.PROVIDER_UNAVAILABLE)

    def succeeded(self) -> None:
        self._failures, self._opened_at = 0, None

    def failed(self) -> None:
        self._failures += 1
        if self._failures >= BREAKER_FAILURES:
            self._opened_at = self._clock()


class OpenAIEmbedder:
    """An :class:`palyra.memory.embed.Embedder` over an OpenAI-compatible endpoint."""

    remote = True

    def __init__(self, config: OpenAIEmbeddingsConfig, api_key: str = "", *,
                 clock: Callable[[], float] = time.monotonic, backoff_s: float = 0.25) -> None:
        self.config = config
        self.name = f"openai:{config.model}"
        self.dim = config.dimensions  # 0 until the first answer says
        self._url = config.base_url.rstrip("/") + "/embeddings"
        self._headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._backoff_s = backoff_s  # the first retry's delay ceiling; doubles each retry
        self._breaker = _Breaker(clock)
        self._client: httpx.AsyncClient | None = None

    def _body(self, texts: Sequence[str]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.config.model, "input": list(texts)}
        if self.config.dimensions:
            body["dimensions"] = self.config.dimensions
        return body

    def _parse(self, response: httpx.Response, count: int) -> Vectors:
        if response.status_code != 200:
            raise _status_failure(response)
        import numpy as np  # here, not at start: see palyra.memory.embed

        try:
            data = response.json()["data"]
            rows = sorted(data, key=lambda d: int(d["index"]))
            matrix = np.asarray([row["embedding"] for row in rows], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as exc:
            raise _Failure(f"malformed answer: {exc}", ErrorCode.PROVIDER_UNAVAILABLE,
                           transient=False) from None
        if matrix.ndim != 2 or len(matrix) != count:
            raise _Failure(f"asked for {count} embeddings, got {len(matrix)}",
                           ErrorCode.PROVIDER_UNAVAILABLE, transient=False)
        if not self.dim:
            self.dim = int(matrix.shape[1])
        if matrix.shape[1] != self.dim:
            raise _Failure(
                f"embedding of dimension {matrix.shape[1]}, expected {self.dim} (a model "
                "change needs a restart, which re-embeds every item)",
                ErrorCode.CONFIG_INVALID, transient=False)
        return normalise(matrix)

    def _batches(self, texts: Sequence[str]) -> list[Sequence[str]]:
        size = self.config.batch_size
        return [texts[i:i + size] for i in range(0, len(texts), size)]

    def _empty(self) -> Vectors:
        import numpy as np

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
        return _joined(parts)

    async def _call(self, post: Callable[[], Awaitable[Vectors]]) -> Vectors:
        self._breaker.check()
        attempt = 0
        while True:
            try:
                vectors = await post()
            except _Failure as failure:
                if failure.transient and attempt < self.config.max_retries:
                    ceiling = min(MAX_DELAY_S, self._backoff_s * 2**attempt)
                    delay = (min(failure.retry_after_s, MAX_DELAY_S)
                             if failure.retry_after_s is not None
                             else random.uniform(ceiling / 2, ceiling))  # jitter
                    await asyncio.sleep(delay)
                    attempt += 1
                    continue
                if failure.transient:
                    self._breaker.failed()
                raise failure.error(attempt + 1) from None
            self._breaker.succeeded()
            return vectors

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One unit row per text: blocking, one attempt (for synchronous callers).

        Raises:
            PalyraError: The endpoint failed or its breaker is open.
        """
        if not texts:
            return self._empty()
        self._breaker.check()
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
        except _Failure as failure:
            if failure.transient:
                self._breaker.failed()
            raise failure.error(1) from None
        self._breaker.succeeded()
        return _joined(parts)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _joined(parts: list[Vectors]) -> Vectors:
    """The batches' rows as one matrix."""
    if len(parts) == 1:
        return parts[0]
    import numpy as np

    joined: Vectors = np.concatenate(parts)
    return joined


def _transport_failure(exc: httpx.HTTPError) -> _Failure:
    kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "connection failed"
    return _Failure(f"{kind}: {type(exc).__name__}: {exc}", ErrorCode.PROVIDER_UNAVAILABLE,
                    transient=True)


def api_key_from(config: OpenAIEmbeddingsConfig, env: Mapping[str, str]) -> str:
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
