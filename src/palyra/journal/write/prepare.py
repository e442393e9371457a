"""Validation, redaction and canonical encoding of drafts, before the writer sees them.

Runs in the caller's thread so that one caller's bad draft fails only that
caller, and so the single writer thread spends its time on hashing and I/O.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from palyra.core.canonical import INT64_MAX, canonical_bytes, canonical_encoder
from palyra.core.errors import AlreadyExists, ErrorCode, InvalidArgument, PalyraError
from palyra.core.event_header import EventHeader
from palyra.core.ids import UlidSequence, is_ulid
from palyra.core.redaction import normalize_screened, redact
from palyra.core.redaction_plan import is_clean_typed
from palyra.journal._types import (
    ENTITY_TABLES,
    NO_TAPE_SEQ,
    EntityWrite,
    EventDraft,
    JournalConfig,
)

# LMDB keys are at most 511 bytes; index keys are u16 + id + u64.
MAX_ID_BYTES = 256
MAX_ENTITY_KEY_BYTES = 400
MAX_FIELD_BYTES = 1024


# Fresh event ids: one sequence per process, so ids made in one millisecond
# count up from one random start instead of reading entropy per id (ids are
# not secrets; only their uniqueness matters, and the sequence keeps that).
_EVENT_IDS = UlidSequence()
os.register_at_fork(after_in_child=_EVENT_IDS.reset)

# canonical_bytes without the call around it (the encoder's own bound method).
_encode = canonical_encoder().encode

UNASSIGNED_POSITION = 0
"""``position`` of a prepared event until the writer assigns the real one (dense from 1)."""


class PreparedEvent(EventHeader, frozen=True, gc=False):
    """A validated draft: ids filled in, payload redacted and encoded.

    ``position`` is :data:`UNASSIGNED_POSITION` and ``tape_seq`` is
    ``NO_TAPE_SEQ`` until the writer assigns both inside the commit
    (``msgspec.structs.replace``), which is what gets hashed.
    """

    tape: bool
    payload: bytes
    value: dict[str, Any]
    redactions: tuple[str, ...]
    entity_writes: tuple[EntityWrite, ...]
    origin: Any = None


def _text(name: str, value: object, limit: int, *, required: bool = False) -> str:
    # Common case first: a plain ASCII string is its own UTF-8 length.
    if (
        value.__class__ is str
        and value.isascii()
        and len(value) <= limit
        and (value or not required)
    ):
        return value
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a string", details={"field": name})
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"{name} is not valid UTF-8", details={"field": name}) from exc
    if size > limit:
        raise InvalidArgument(f"{name} is longer than {limit} bytes", details={"field": name})
    if required and not value:
        raise InvalidArgument(f"{name} is required", details={"field": name})
    return str(value)


def _entity_write(write: object, config: JournalConfig) -> EntityWrite:
    if write.__class__ is EntityWrite:
        # The usual write, already as stored: an ASCII key within its limit and a
        # bytes value (or None) within its cap. Every part is immutable, so the
        # caller's object is kept as it is (no copy of the value, no new write).
        table, key, value = write.table, write.key, write.value
        if (table in ENTITY_TABLES and key.__class__ is str and key.isascii()
                and 0 < len(key) <= MAX_ENTITY_KEY_BYTES
                and (value is None or (value.__class__ is bytes
                                       and len(value) <= config.max_entity_bytes))):
            return write
    if not isinstance(write, EntityWrite):
        raise InvalidArgument("entity_writes must hold EntityWrite values")
    if write.table not in ENTITY_TABLES:
        raise InvalidArgument(
            f"unknown entity table {write.table!r}", details={"table": str(write.table)}
        )
    key = _text("entity key", write.key, MAX_ENTITY_KEY_BYTES, required=True)
    value = write.value
    if value is not None:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise InvalidArgument("entity value must be bytes or None")
        value = bytes(value)
        if len(value) > config.max_entity_bytes:
            raise PalyraError(
                f"entity {write.table}/{key} is {len(value)} bytes; limit is "
                f"{config.max_entity_bytes}",
                code=ErrorCode.PAYLOAD_TOO_LARGE,
            )
    return EntityWrite(write.table, key, value)


def prepare_draft(draft: EventDraft, config: JournalConfig, now_ms: int) -> PreparedEvent:
    """Validate one draft and produce its stored form.

    Raises:
        InvalidArgument: a field is malformed (non-ULID ``event_id``, an int
            outside 64 bits, a non-JSON payload value, ``tape`` without
            ``run_id``, an unknown entity table, …).
        PalyraError: ``PAYLOAD_TOO_LARGE`` when the payload or an entity value
            is over its cap.
    """
    if draft.__class__ is not EventDraft and not isinstance(draft, EventDraft):
        raise InvalidArgument("append expects EventDraft values")
    event_id = _given_id(draft.event_id) if draft.event_id else _EVENT_IDS.next(now_ms)
    # The fields as given (any type: a caller may pass anything), checked just below.
    s, r, k, a = draft.session_id, draft.run_id, draft.kind, draft.actor
    p, d, c = draft.principal, draft.device_id, draft.channel
    # The usual case: every header text an exact ``str`` (their hash and equality are
    # str's own), and a header and a kind that passed before (a run's drafts repeat one
    # header and a few kinds), so no per-field check can fail and the fourteen length
    # and ASCII calls are skipped. A new header or kind is checked and remembered by
    # ``_check_new_header``; anything else one by one, for its error message.
    if not (
        s.__class__ is str and r.__class__ is str and k.__class__ is str
        and a.__class__ is str and p.__class__ is str and d.__class__ is str
        and c.__class__ is str
    ):  # fmt: skip
        s, r, k, a, p, d, c = _checked_texts(draft)  # one by one, for their error messages
    elif k not in _PLAIN_KINDS or (s, r, a, p, d, c) not in _PLAIN_HEADERS:
        s, r, k, a, p, d, c = _check_new_header(draft)
    tape = draft.tape
    if tape and not r:
        raise InvalidArgument("a tape event needs a run_id", details={"field": "run_id"})
    ts_ms = draft.ts_ms
    if (ts_ms.__class__ is not int and (
            isinstance(ts_ms, bool) or not isinstance(ts_ms, int))) or not 0 <= ts_ms <= INT64_MAX:
        raise InvalidArgument("ts_ms must be a non-negative 64-bit int", details={"field": "ts_ms"})
    origin = draft.origin
    plain, clean, raw = _payload(draft.payload, origin, config)
    writes = draft.entity_writes
    paths: tuple[str, ...] = ()
    if clean:
        value, stored = plain, raw
    else:
        redaction = redact(plain)
        value, paths = redaction.value, redaction.paths
        if paths:  # what followers see must be what was stored: the origin only when equal
            stored, origin = canonical_bytes(value), None
        else:
            stored = raw
    # Positional: header fields in EventHeader order, then PreparedEvent's own.
    return PreparedEvent(
        UNASSIGNED_POSITION, event_id, s, r, NO_TAPE_SEQ, k, a, ts_ms or now_ms, p, d, c,
        tape is True or bool(tape), stored, value, paths,
        tuple([_entity_write(w, config) for w in writes]) if writes else (),
        origin,
    )  # fmt: skip


# Header texts (session, run, actor, principal, device, channel) and kinds that
# passed the check above. Bounded: each forgotten all at once when full (a run's
# drafts need one header while it runs; an idle daemon keeps at most this many).
_PLAIN_HEADERS: set[tuple[str, ...]] = set()
_PLAIN_KINDS: set[str] = set()
_PLAIN_MAX = 2048


def _check_new_header(draft: EventDraft) -> tuple[str, str, str, str, str, str, str]:
    """The exact-``str`` header texts of ``draft``, not remembered yet, checked: by one
    test for the usual case (each ASCII within its limit, ``kind`` set), then
    remembered; otherwise one by one (non-ASCII texts, and errors with their message)."""
    s, r, k, a = draft.session_id, draft.run_id, draft.kind, draft.actor
    p, d, c = draft.principal, draft.device_id, draft.channel
    if not (
        k
        and len(s) <= MAX_ID_BYTES and len(r) <= MAX_ID_BYTES
        and len(k) <= MAX_FIELD_BYTES and len(a) <= MAX_FIELD_BYTES
        and len(p) <= MAX_FIELD_BYTES and len(d) <= MAX_FIELD_BYTES
        and len(c) <= MAX_FIELD_BYTES
        and s.isascii() and r.isascii() and k.isascii() and a.isascii()
        and p.isascii() and d.isascii() and c.isascii()
    ):  # fmt: skip
        return _checked_texts(draft)
    _remember_header(k, (s, r, a, p, d, c))
    return s, r, k, a, p, d, c


def _remember_header(kind: str, header: tuple[str, ...]) -> None:
    if len(_PLAIN_KINDS) >= _PLAIN_MAX:
        _PLAIN_KINDS.clear()
    _PLAIN_KINDS.add(kind)
    if len(_PLAIN_HEADERS) >= _PLAIN_MAX:
        _PLAIN_HEADERS.clear()
    _PLAIN_HEADERS.add(header)


def _given_id(event_id: Any) -> str:
    """A caller's ``event_id``, which must be a ULID."""
    checked = _text("event_id", event_id, 26)
    if not is_ulid(checked):
        raise InvalidArgument(f"event_id {checked!r} is not a ULID", details={"field": "event_id"})
    return checked


def _checked_texts(draft: EventDraft) -> tuple[str, str, str, str, str, str, str]:
    """The header texts of ``draft`` checked one by one (the slow path, for its errors)."""
    return (
        _text("session_id", draft.session_id, MAX_ID_BYTES),
        _text("run_id", draft.run_id, MAX_ID_BYTES),
        _text("kind", draft.kind, MAX_FIELD_BYTES, required=True),
        _text("actor", draft.actor, MAX_FIELD_BYTES),
        _text("principal", draft.principal, MAX_FIELD_BYTES),
        _text("device_id", draft.device_id, MAX_FIELD_BYTES),
        _text("channel", draft.channel, MAX_FIELD_BYTES),
    )


def _payload(
    payload: Any, origin: Any, config: JournalConfig
) -> tuple[dict[str, Any], bool, bytes]:
    """``(plain payload, clean, canonical bytes)``: normalized, screened for secrets, sized."""
    if payload.__class__ is dict and origin is not None:
        # A draft with an origin is the engine's: its payload is the proto3 JSON of
        # that message (plain by construction), so the normalizing walk is skipped
        # and only the screen runs, over the fields of that message that can carry
        # free text (most engine events need no redaction walk).
        plain, clean = payload, is_clean_typed(payload, origin.__class__)
    elif payload.__class__ is not dict and not isinstance(payload, Mapping):
        raise InvalidArgument("payload must be a mapping", details={"field": "payload"})
    else:
        # One walk normalizes and, for the usual payload, settles that redaction
        # changes nothing in it; otherwise redact() walks it as before.
        plain, clean = normalize_screened(payload)
    raw = _encode(plain)  # canonical_bytes
    if len(raw) > config.max_payload_bytes:
        raise PalyraError(
            f"payload is {len(raw)} bytes; limit is {config.max_payload_bytes}",
            code=ErrorCode.PAYLOAD_TOO_LARGE,
            details={"limit": str(config.max_payload_bytes), "size": str(len(raw))},
        )
    return plain, clean, raw


def prepare(drafts: Sequence[EventDraft], config: JournalConfig) -> list[PreparedEvent]:
    """Prepare one ``append`` call; duplicate ids inside the call are refused."""
    now_ms = time.time_ns() // 1_000_000
    if len(drafts) == 1:  # the usual call: nothing to compare ids with
        return [prepare_draft(drafts[0], config, now_ms)]
    prepared = [prepare_draft(d, config, now_ms) for d in drafts]
    for draft in drafts:
        if draft.event_id:  # a caller's id: compared with every other below
            break
    else:  # every id fresh from one monotonic sequence: distinct by construction
        return prepared
    seen: set[str] = set()
    for event in prepared:
        if event.event_id in seen:
            raise AlreadyExists(
                f"event_id {event.event_id} appears twice in one append",
                details={"event_id": event.event_id},
            )
        seen.add(event.event_id)
    return prepared
