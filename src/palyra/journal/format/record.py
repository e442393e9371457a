"""Stored record formats and LMDB key layouts.

A record holds one or more events at consecutive positions, all of one
session, and is stored in ``_events`` under the big-endian u64 of its *last*
position, so ``set_range(u64(p))`` lands on the record holding ``p``.

Format 2 (written now): a fixed binary front, then the record's hashed bytes
verbatim, so verification hashes the stored bytes without decoding them::

    0x02 || record_hash(32) || global_hash(32) || record_head || record_body

(``palyra.core.chain.record_head`` / ``record_body``; ``record_hash`` is the
SHA-256 of everything after the first 65 bytes). Readers decode the body with
msgspec in one pass.

Format 1 (journals written before): one event per record, a MessagePack map
(first byte ``0xde``) of :class:`EventRecord`, hashed with ``event_hash``.
Both are read and verified side by side.

Tombstones (format 3, written by retention): a pruned record of either format,
rewritten in place under the same key, keeping only what the chains need::

    0x03 || record_hash(32) || global_hash(32) || prev_hash(32) || u64 first
         || u32 count || u8 source format || i64 pruned_at_ms || text(session_id)

Its events are gone; its hashes still link the session chain and the global
chain, so verification walks through it (``verify.chainwalk``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

from palyra.core.canonical import decode_canonical
from palyra.core.chain import RECORD_TAG, link_hash, record_hash
from palyra.core.event_header import EventHeader, header_values
from palyra.journal._types import StoredEvent

RECORD_VERSION = 1
"""``v`` of format 1 event records and of checkpoint records."""

RECORD_FORMAT = 2
"""First byte of a format 2 record."""

TOMBSTONE_FORMAT = 3
"""First byte of a tombstone (a record whose events retention pruned)."""

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")

# Offsets into a stored format 2 record.
HASH_AT = 1
GLOBAL_AT = HASH_AT + 32
HASHED_AT = GLOBAL_AT + 32
PREV_AT = HASHED_AT + len(RECORD_TAG)
FIRST_AT = PREV_AT + 32
SESSION_AT = FIRST_AT + 8 + 4 + 4  # u64 first, u32 count, u32 session length
FRONT = struct.Struct(">QII")  # first, count, len(session_id) at FIRST_AT

# A tombstone: hashes at the same offsets as format 2, then a fixed front.
TOMB_PREV_AT = HASHED_AT
TOMB_FRONT = struct.Struct(">QIBqI")  # first, count, source format, pruned_at_ms, len(session)
TOMB_FRONT_AT = TOMB_PREV_AT + 32
TOMB_SESSION_AT = TOMB_FRONT_AT + TOMB_FRONT.size

RETENTION_SESSION = "~journal"
"""Session of ``journal.pruned`` events (a prune's claim): never a ULID, so no client session shares it."""
PRUNED_KIND = "journal.pruned"
PRUNED_ACTOR = "system:journal"


class EventRecord(EventHeader, frozen=True):
    """A format 1 record: one event, stored under its position.

    The header fields come from :class:`EventHeader`; ``v`` is :data:`RECORD_VERSION`.
    """

    v: int
    payload: bytes
    redactions: list[str]
    prev_hash: bytes
    hash: bytes
    global_hash: bytes


class RecordEvent(msgspec.Struct, array_like=True, frozen=True):
    """One event of a format 2 record body, as ``palyra.core.chain.record_row`` lays it out."""

    event_id: str
    run_id: str
    tape_seq: int
    kind: str
    actor: str
    ts_ms: int
    principal: str
    device_id: str
    channel: str
    redactions: list[str]
    payload: dict[str, Any]


class CheckpointRecord(msgspec.Struct, frozen=True):
    """A signed checkpoint as stored in the ``checkpoints`` sub-DB."""

    v: int
    # Bounded as the signed message packs ts_ms (i64; position stays in u64 as
    # msgpack has no larger int): a record outside them
    # is undecodable (tampered), not a crash of the verifier.
    position: Annotated[int, msgspec.Meta(ge=0)]
    head: bytes
    ts_ms: Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
    public_key: bytes
    signature: bytes


_ENCODER = msgspec.msgpack.Encoder(order="sorted")
_EVENT_DECODER = msgspec.msgpack.Decoder(EventRecord)
_CHECKPOINT_DECODER = msgspec.msgpack.Decoder(CheckpointRecord)
_BODY_DECODER = msgspec.msgpack.Decoder(list[RecordEvent])
_RAW_BODY_DECODER = msgspec.msgpack.Decoder(list[msgspec.Raw])
_ROW_DECODER = msgspec.msgpack.Decoder(RecordEvent)


def encode_record(record: EventRecord | CheckpointRecord) -> bytes:
    """MessagePack bytes of a format 1 event record or a checkpoint record."""
    return _ENCODER.encode(record)


def decode_event(data: bytes) -> EventRecord:
    """Decode a format 1 record (raises ``msgspec.DecodeError`` when malformed)."""
    return _EVENT_DECODER.decode(data)


def decode_checkpoint(data: bytes) -> CheckpointRecord:
    """Decode a checkpoint record (raises ``msgspec.DecodeError`` when malformed)."""
    return _CHECKPOINT_DECODER.decode(data)


def build_record(
    head: bytes, body: bytes, prev_global: bytes, last_position: int
) -> tuple[bytes, bytes, bytes]:
    """``(stored bytes, record_hash, global_hash)`` of a format 2 record."""
    digest = record_hash(head, body)
    link = link_hash(prev_global, last_position, digest)
    return b"".join((b"\x02", digest, link, head, body)), digest, link


def is_format2(value: bytes) -> bool:
    """True when ``value`` is a format 2 record (format 1 starts with ``0xde``)."""
    return len(value) > SESSION_AT and value[0] == RECORD_FORMAT


def is_tombstone(value: bytes) -> bool:
    """True when ``value`` is a tombstone (format 3)."""
    return len(value) >= TOMB_SESSION_AT and value[0] == TOMBSTONE_FORMAT


@dataclass(frozen=True, slots=True)
class Tombstone:
    """The decoded front of a tombstone: what the chains need of a pruned record."""

    first: int
    last: int
    session_id: str
    prev_hash: bytes
    hash: bytes
    global_hash: bytes
    source_format: int
    pruned_at_ms: int


def encode_tombstone(record: Record, pruned_at_ms: int) -> bytes:
    """The tombstone that replaces ``record`` (its events dropped, its hashes kept)."""
    session = record.session_id.encode("utf-8")
    source = 2 if isinstance(record.body, bytes) else 1
    return b"".join((
        bytes((TOMBSTONE_FORMAT,)), record.hash, record.global_hash, record.prev_hash,
        TOMB_FRONT.pack(record.first, record.last - record.first + 1, source, pruned_at_ms,
                        len(session)),
        session,
    ))


def decode_tombstone(value: bytes) -> Tombstone:
    """Decode a tombstone.

    Raises:
        ValueError: the bytes are not a well-formed tombstone.
    """
    if not is_tombstone(value):
        raise ValueError("not a tombstone")
    first, count, source, pruned_at_ms, session_len = TOMB_FRONT.unpack_from(value, TOMB_FRONT_AT)
    if count < 1 or TOMB_SESSION_AT + session_len != len(value):
        raise ValueError("malformed tombstone")
    return Tombstone(
        first,
        first + count - 1,
        value[TOMB_SESSION_AT:].decode("utf-8"),
        value[TOMB_PREV_AT : TOMB_PREV_AT + 32],
        value[HASH_AT:GLOBAL_AT],
        value[GLOBAL_AT:HASHED_AT],
        source,
        pruned_at_ms,
    )


def record_hashes(value: bytes) -> tuple[bytes, bytes]:
    """``(record_hash, global_hash)`` of a stored record of any format."""
    if value[0] in (RECORD_FORMAT, TOMBSTONE_FORMAT):
        return bytes(value[HASH_AT:GLOBAL_AT]), bytes(value[GLOBAL_AT:HASHED_AT])
    legacy = decode_event(value)
    return legacy.hash, legacy.global_hash


@dataclass(frozen=True, slots=True)
class Record:
    """A decoded record front of either format; its events are decoded on demand."""

    first: int
    last: int
    session_id: str
    prev_hash: bytes
    hash: bytes
    global_hash: bytes
    body: bytes | EventRecord  # format 2: the body bytes; format 1: the whole record
    size: int  # stored bytes of the record
    pruned: bool = False  # a tombstone: no events left (``body`` is empty)

    def events(self) -> list[StoredEvent]:
        """The record's events, in position order, as the public API shows them.

        A tombstone has none (callers check :attr:`pruned` first).
        """
        if self.pruned:
            return []
        if isinstance(self.body, EventRecord):
            return [legacy_stored(self.body)]
        hashes = self.hash.hex(), self.prev_hash.hex(), self.global_hash.hex()
        first, session = self.first, self.session_id
        return [
            event_view(first + i, session, row, hashes)
            for i, row in enumerate(_BODY_DECODER.decode(self.body))
        ]

    def sized_events(self) -> list[tuple[StoredEvent, int]]:
        """:meth:`events` with each event's stored size in bytes (what page caps count)."""
        if self.pruned:
            return []
        if isinstance(self.body, EventRecord):
            return [(legacy_stored(self.body), self.size)]
        hashes = self.hash.hex(), self.prev_hash.hex(), self.global_hash.hex()
        first, session = self.first, self.session_id
        return [
            (event_view(first + i, session, _ROW_DECODER.decode(raw), hashes), len(raw))
            for i, raw in enumerate(_RAW_BODY_DECODER.decode(self.body))
        ]


def event_view(
    position: int, session_id: str, row: RecordEvent, hashes: tuple[str, str, str]
) -> StoredEvent:
    """One format 2 event as a :class:`StoredEvent` (``hashes``: hex hash, prev, global)."""
    return StoredEvent(
        position,
        row.event_id,
        session_id,
        row.run_id,
        row.tape_seq,
        row.kind,
        row.actor,
        row.ts_ms,
        row.principal,
        row.device_id,
        row.channel,
        payload=row.payload,
        redactions=row.redactions,
        hash=hashes[0],
        prev_hash=hashes[1],
        global_hash=hashes[2],
    )


def decode_record(value: bytes) -> Record:
    """Decode the record stored as ``value`` (either format).

    Raises:
        msgspec.DecodeError: the bytes are neither format.
        ValueError: a format 2 front or a tombstone is inconsistent.
    """
    if value[:1] == bytes((TOMBSTONE_FORMAT,)):
        tomb = decode_tombstone(value)
        return Record(tomb.first, tomb.last, tomb.session_id, tomb.prev_hash, tomb.hash,
                      tomb.global_hash, b"", len(value), pruned=True)
    if not is_format2(value):
        legacy = decode_event(value)
        return Record(
            legacy.position,
            legacy.position,
            legacy.session_id,
            legacy.prev_hash,
            legacy.hash,
            legacy.global_hash,
            legacy,
            len(value),
        )
    first, count, session_len = FRONT.unpack_from(value, FIRST_AT)
    end = SESSION_AT + session_len
    if count < 1 or end > len(value):
        raise ValueError("malformed record front")
    return Record(
        first,
        first + count - 1,
        value[SESSION_AT:end].decode("utf-8"),
        value[PREV_AT : PREV_AT + 32],
        value[HASH_AT:GLOBAL_AT],
        value[GLOBAL_AT:HASHED_AT],
        value[end:],
        len(value),
    )


def legacy_stored(record: EventRecord, payload: Any = None) -> StoredEvent:
    """The public view of a format 1 record (``payload``: decoded, if already known)."""
    if payload is None:
        payload = decode_canonical(record.payload)
    return StoredEvent(
        *header_values(record),
        payload=payload if isinstance(payload, dict) else {},
        redactions=list(record.redactions),
        hash=record.hash.hex(),
        prev_hash=record.prev_hash.hex(),
        global_hash=record.global_hash.hex(),
    )


# --- keys -----------------------------------------------------------------
# Positions and sequence numbers are big-endian so LMDB's byte order is their
# numeric order; string components are length-prefixed so one id can never be
# a prefix of another's composite key.


def u64_key(value: int) -> bytes:
    """Big-endian u64 key (positions, checkpoint positions)."""
    return _U64.pack(value)


def key_u64(key: bytes) -> int:
    """Inverse of :func:`u64_key` on the last 8 bytes of ``key``."""
    return int(_U64.unpack(key[-8:])[0])


def scoped_prefix(scope: str) -> bytes:
    """``u16(len) || utf8(scope)``: prefix of every index key of a session or run."""
    raw = scope.encode("utf-8")
    return _U16.pack(len(raw)) + raw


def scoped_key(scope: str, number: int) -> bytes:
    """Index key ``scoped_prefix(scope) || u64(number)``."""
    return scoped_prefix(scope) + _U64.pack(number)
