"""Retry-with-backoff and a circuit breaker for calls to remote providers.

Both pieces are small and reusable (channels and webhooks need the same).
The breaker takes an injectable clock so tests can move time without sleeping.

Failure accounting:

* A *call* is one logical request including its retries. The breaker counts
  consecutive failed calls, not attempts, so one flaky request does not trip it.
* Only failures that say something about the remote's health count: 429, 5xx,
  connection errors and timeouts (``ProviderFailure.transient``). A 400 is our
  fault and resets nothing either way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import random
import time
from collections.abc import Callable

from palyra.core.errors import ErrorCode, PalyraError


class BreakerState(enum.StrEnum):
    """Circuit breaker states."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    """Fails fast after repeated transient failures of a dependency.

    Opens after ``failure_threshold`` consecutive failed calls; while open,
    ``check()`` raises ``PalyraError(code=PROVIDER_UNAVAILABLE)``. After
    ``reset_after_s`` it lets one trial call through (half-open): success
    closes it, failure re-opens it for another ``reset_after_s``.

    Args:
        name: Used in the error message (e.g. ``openai``).
        failure_threshold: Consecutive failures that open the breaker.
        reset_after_s: Seconds the breaker stays open.
        clock: Monotonic clock; injectable for tests.
    """

    def __init__(
        self,
        name: str,
        *,
        failure_threshold: int = 3,
        reset_after_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._name = name
        self._threshold = max(1, failure_threshold)
        self._reset_after_s = reset_after_s
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._trial_in_flight = False

    @property
    def state(self) -> BreakerState:
        """The current state (reading it never changes it)."""
        if self._opened_at is None:
            return BreakerState.CLOSED
        if self._clock() - self._opened_at >= self._reset_after_s:
            return BreakerState.HALF_OPEN
        return BreakerState.OPEN

    def check(self) -> None:
        """Admit a call or fail fast.

        Raises:
            PalyraError: ``PROVIDER_UNAVAILABLE`` while the breaker is open, or
                half-open with its one trial call already in flight.
        """
        state = self.state
        if state is BreakerState.CLOSED:
            return
        if state is BreakerState.HALF_OPEN and not self._trial_in_flight:
            self._trial_in_flight = True
            return
        assert self._opened_at is not None
        retry_in = max(0.0, self._reset_after_s - (self._clock() - self._opened_at))
        raise PalyraError(
            f"{self._name} provider circuit breaker is open after {self._failures} "
            f"consecutive failures; retry in {retry_in:.1f}s",
            code=ErrorCode.PROVIDER_UNAVAILABLE,
            details={"provider": self._name, "retry_in_s": f"{retry_in:.1f}"},
        )

    def record_success(self) -> None:
        """Close the breaker and reset the failure count."""
        self._failures = 0
        self._opened_at = None
        self._trial_in_flight = False

    def record_failure(self) -> None:
        """Count a failed call; open (or re-open) the breaker at the threshold."""
        self._failures += 1
        self._trial_in_flight = False
        if self._failures >= self._threshold:
            self._opened_at = self._clock()

    def release(self) -> None:
        """End a call that neither succeeded nor failed transiently.

        Used for cancellations and caller errors (e.g. HTTP 400), so a
        half-open trial slot is freed without changing the failure count.
        """
        self._trial_in_flight = False


@dataclasses.dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with jitter.

    Attributes:
        max_retries: Retries after the first attempt (2 → up to 3 attempts).
        base_delay_s: Delay ceiling of the first retry.
        max_delay_s: Cap of any single delay, including a server's Retry-After.
    """

    max_retries: int = 2
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0

    def delay_s(self, retry_index: int, retry_after_s: float | None = None) -> float:
        """Seconds to wait before retry number ``retry_index`` (0-based).

        A server-sent ``Retry-After`` wins when given, capped at ``max_delay_s``.
        """
        if retry_after_s is not None:
            return max(0.0, min(retry_after_s, self.max_delay_s))
        ceiling = min(self.max_delay_s, self.base_delay_s * (2**retry_index))
        # Jitter (between half and all of the ceiling) spreads out the retries
        # of many runs hitting one outage.
        return random.uniform(ceiling / 2, ceiling)

    async def sleep(self, retry_index: int, retry_after_s: float | None = None) -> None:
        """Sleep before a retry (cancellable)."""
        await asyncio.sleep(self.delay_s(retry_index, retry_after_s))


class ProviderFailure(Exception):
    """One failed attempt against a remote provider, before translation.

    Attributes:
        message: What went wrong, for the final ``PalyraError``.
        code: The ``ErrorCode`` the caller sees if this is the last attempt.
        transient: Whether retrying may help and the breaker should count it.
        retry_after_s: A server-provided retry delay, if any.
        status: The HTTP status, or 0 for transport errors.
    """

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode,
        transient: bool,
        retry_after_s: float | None = None,
        status: int = 0,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.transient = transient
        self.retry_after_s = retry_after_s
        self.status = status

    def to_error(self, provider: str, attempts: int) -> PalyraError:
        """Translate into the ``PalyraError`` the caller sees."""
        suffix = f" after {attempts} attempts" if attempts > 1 else ""
        details = {"provider": provider, "attempts": str(attempts)}
        if self.status:
            details["http_status"] = str(self.status)
        return PalyraError(
            f"{provider} provider: {self.message}{suffix}", code=self.code, details=details
        )


def failure_for_status(status: int, body: str, retry_after: str | None) -> ProviderFailure:
    """Classify a non-2xx HTTP response.

    429 and 5xx are transient. 401/403/404 mean the key, URL or model in the
    config is wrong (``CONFIG_INVALID``); other 4xx mean the vendor rejected
    the request (``INVALID_ARGUMENT``).
    """
    snippet = body[:300]
    retry_after_s: float | None = None
    if retry_after:
        try:
            retry_after_s = float(retry_after)
        except ValueError:
            retry_after_s = None  # HTTP-date form: fall back to our own backoff
    if status == 429:
        return ProviderFailure(
            f"rate limited (HTTP 429): {snippet}",
            code=ErrorCode.RESOURCE_EXHAUSTED,
            transient=True,
            retry_after_s=retry_after_s,
            status=status,
        )
    if status >= 500:
        return ProviderFailure(
            f"server error (HTTP {status}): {snippet}",
            code=ErrorCode.PROVIDER_UNAVAILABLE,
            transient=True,
            retry_after_s=retry_after_s,
            status=status,
        )
    code = ErrorCode.CONFIG_INVALID if status in (401, 403, 404) else ErrorCode.INVALID_ARGUMENT
    return ProviderFailure(
        f"request rejected (HTTP {status}): {snippet}", code=code, transient=False, status=status
    )
