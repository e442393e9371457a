"""One model call over a route: the first target that answers, failing over before output.

A failover happens only inside one model call and only before any of its output
reached the caller: a provider that already streamed text, or whose answer
was complete, is never asked again, so no text is shown twice and no tool call
is made twice. Only errors that say the provider is unwell move on (a retryable
code: 5xx, 429, timeouts, transport errors, an open circuit breaker, each after
the provider's own retries); a request the vendor refused (400, a bad key) is
raised as is, since the next provider would be asked the same thing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing

import msgspec

from palyra.core.errors import ErrorCode, PalyraError, PalyraInternalError
from palyra.providers._registry import Target
from palyra.providers._types import Completed, ModelProvider, ModelRequest, ModelResponse, TextDelta


@dataclasses.dataclass(frozen=True, slots=True)
class Failover:
    """A target passed over, and why."""

    target: Target
    code: ErrorCode
    message: str


@dataclasses.dataclass(frozen=True, slots=True)
class Answered:
    """The end of a routed call: the response and who gave it."""

    response: ModelResponse
    target: Target
    failovers: tuple[Failover, ...] = ()
    cached: bool = False


async def stream_routed(candidates: Sequence[tuple[Target, ModelProvider]],
                        request: ModelRequest) -> AsyncGenerator[TextDelta | Answered, None]:
    """Stream text deltas of the first target that answers, then one :class:`Answered`.

    Raises:
        PalyraError: the last target's error, or any error after output began, or
            a non-retryable one.
    """
    failovers: list[Failover] = []
    for index, (target, provider) in enumerate(candidates):
        streamed = False
        asked = msgspec.structs.replace(request, model=target.model or request.model)
        chunks = provider.stream(asked)
        try:
            try:  # contextlib.aclosing's work, without its three calls a model call
                async for chunk in chunks:
                    if isinstance(chunk, Completed):
                        yield Answered(chunk.response, target, tuple(failovers))
                        return
                    streamed = True
                    yield chunk
            finally:
                await chunks.aclose()
        except PalyraError as exc:
            if streamed or not exc.retryable or index == len(candidates) - 1:
                raise
            failovers.append(Failover(target, exc.code, exc.message))
            continue
        raise PalyraInternalError(f"provider {target.provider} ended without an answer")
    raise PalyraInternalError("a model route with no target")


async def complete_routed(candidates: Sequence[tuple[Target, ModelProvider]],
                          request: ModelRequest) -> Answered:
    """The whole answer of the first target that answers (:func:`stream_routed`, buffered):
    for work beside a run's own turns that should ask the run's route (compaction,
    reflection), failing over the same way.

    Raises:
        PalyraError: as :func:`stream_routed`.
    """
    async with aclosing(stream_routed(candidates, request)) as chunks:
        async for chunk in chunks:
            if isinstance(chunk, Answered):
                return chunk
    raise PalyraInternalError("a routed call ended without an answer")
