"""One model call of a run: its route, the response cache, failover.

The run's route (``RunRecord.model_route``, fixed at its start) is resolved
through the provider registry at each call, so a resumed run asks the same
providers. With the agent's response cache on and a repeatable request, the
answer may come from the journal's ``meta`` table; a fresh answer from the
primary target is stored in the same commit as the turn's output
(``Routed.cache_write``), so the cache never holds an answer the tape lacks.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import AsyncGenerator

import msgspec

from palyra.core.errors import ErrorCode, PalyraError
from palyra.engine.model.attachments import ATTACHMENT_TABLE, blob_key
from palyra.engine.run.deps import EngineDeps
from palyra.engine.run.step import Step
from palyra.journal import EntityWrite, JournalStore
from palyra.providers import (
    CACHE_KEY_PREFIX,
    Answered,
    CachedAnswer,
    ChatMessage,
    ModelRequest,
    TextDelta,
    cacheable,
    decode_entry,
    encode_entry,
    request_digest,
    stream_routed,
)

CACHE_TABLE = "meta"
_IMAGES = operator.attrgetter("images")


@dataclasses.dataclass(frozen=True, slots=True)
class Routed:
    """A routed call's answer, and the cache entry to commit with it (if any)."""

    answer: Answered
    cache_write: EntityWrite | None = None


class ModelCall:
    """One model call under way: its chunks, and the answer as the run records it.

    The chunks are :func:`palyra.providers.stream_routed`'s own generator (or the
    cache's replay), not a generator wrapped around it: a third nested generator cost
    each text delta another frame resumed and each call another ``aclosing``, and all
    it added was the cache entry, which :meth:`routed` makes from the answer.
    """

    __slots__ = ("_deps", "_digest", "chunks")

    def __init__(self, deps: EngineDeps, digest: str,
                 chunks: AsyncGenerator[TextDelta | Answered, None]) -> None:
        self._deps = deps
        self._digest = digest
        self.chunks = chunks

    def routed(self, answer: Answered) -> Routed:
        """``answer`` with the cache entry to commit in the turn's append (if any)."""
        digest = self._digest
        # Only the primary's own fresh answer is stored: a fallback's would later stand
        # in for the primary under the primary's key, and a cached one is stored already.
        if not digest or answer.failovers or answer.cached:
            return Routed(answer)
        return Routed(answer, EntityWrite(CACHE_TABLE, CACHE_KEY_PREFIX + digest, encode_entry(
            CachedAnswer(response=answer.response, provider=answer.target.provider,
                         digest=digest, created_ms=self._deps.now_ms()))))


def call_model(step: Step, request: ModelRequest) -> ModelCall:
    """Start the call: its text deltas, then one :class:`Answered` (``ModelCall.routed``
    makes the run's :class:`Routed` of it).

    Raises:
        PalyraError: ``CONFIG_INVALID`` for a route the config no longer serves;
            ``INVALID_ARGUMENT`` for images no provider of the route accepts;
            otherwise (from the chunks) what :func:`palyra.providers.stream_routed` raises.
    """
    deps, record = step.deps, step.record
    candidates = deps.models.resolve(record.model_route)
    if any(map(_IMAGES, request.messages)):  # the whole history, each turn: no frame per message
        candidates = [c for c in candidates if deps.models.config(c[0].provider).vision]
        if not candidates:
            raise PalyraError(
                "the input has images and no provider of this run's route accepts images "
                f"({', '.join(record.model_route) or 'the default provider'}); use an agent "
                "whose provider has vision = true", code=ErrorCode.INVALID_ARGUMENT,
                details={"field": "input.attachments"})
        request = msgspec.structs.replace(request, messages=[
            _loaded(deps.store, m) for m in request.messages])
    primary = candidates[0][0]
    digest = (request_digest(primary, request)
              if record.response_cache and cacheable(request) else "")
    if digest:
        raw = deps.store.get_entity(CACHE_TABLE, CACHE_KEY_PREFIX + digest)
        entry = decode_entry(raw) if raw is not None else None
        if entry is not None and entry.digest == digest:
            return ModelCall(deps, digest, _replay(Answered(entry.response, primary,
                                                            cached=True)))
    return ModelCall(deps, digest, stream_routed(candidates, request))


async def _replay(answer: Answered) -> AsyncGenerator[TextDelta | Answered, None]:
    """A cached answer as a call streams one: its text as one delta, then the answer."""
    if answer.response.text:
        yield TextDelta(answer.response.text)
    yield answer


def _loaded(store: JournalStore, message: ChatMessage) -> ChatMessage:
    """``message`` with its images' bytes read from the attachment store."""
    if not message.images:
        return message
    images = []
    for image in message.images:
        data = store.get_entity(ATTACHMENT_TABLE, blob_key(image.sha256))
        if data is None:
            raise PalyraError(f"attachment {image.sha256} is not in the attachment store",
                              code=ErrorCode.NOT_FOUND, details={"sha256": image.sha256})
        images.append(msgspec.structs.replace(image, data=data))
    return msgspec.structs.replace(message, images=images)
