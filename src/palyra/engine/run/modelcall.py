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


async def call_model(step: Step, request: ModelRequest
                     ) -> AsyncGenerator[TextDelta | Routed, None]:
    """Stream the call's text deltas, then one :class:`Routed`.

    Raises:
        PalyraError: ``CONFIG_INVALID`` for a route the config no longer serves;
            otherwise what :func:`palyra.providers.stream_routed` raises.
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
            if entry.response.text:
                yield TextDelta(entry.response.text)
            yield Routed(Answered(entry.response, primary, cached=True))
            return
    async for chunk in stream_routed(candidates, request):
        if isinstance(chunk, TextDelta):
            yield chunk
            continue
        write = None
        if digest and not chunk.failovers:
            # Only the primary's own answer is stored: a fallback's would later
            # stand in for the primary under the primary's key.
            write = EntityWrite(CACHE_TABLE, CACHE_KEY_PREFIX + digest, encode_entry(
                CachedAnswer(response=chunk.response, provider=chunk.target.provider,
                             digest=digest, created_ms=deps.now_ms())))
        yield Routed(chunk, write)


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
