"""Stored record format and LMDB key layouts.

Records are msgspec Structs encoded as MessagePack with sorted field names and
a ``v`` version field, so a future layout can be decoded side by side. The
record encoding is *not* what the chain hashes (see ``palyra.core.chain``);
it only has to round-trip. Because keys are sorted, the order of a record's
fields in its class does not reach the stored bytes.
"""

from __future__ import annotations

import struct
from typing import Any

import msgspec

from palyra.core.canonical import decode_canonical
from palyra.core.event_header import EventHeader, header_values
from palyra.journal._types import StoredEvent

RECORD_VERSION = 1

_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")


class EventRecord(EventHeader, frozen=True):
    """One event as stored in the ``events`` sub-DB under its position.

    The header fields come from :class:`EventHeader`; ``v`` is the record version.
    """

    v: int
    payload: bytes
    redactions: list[str]
    prev_hash: bytes
    hash: bytes
    global_hash: bytes


class CheckpointRecord(msgspec.Struct, frozen=True):
    """A signed checkpoint as stored in the ``checkpoints`` sub-DB."""

    v: int
    position: int
    head: bytes
    ts_ms: int
    public_key: bytes
    signature: bytes


_ENCODER = msgspec.msgpack.Encoder(order="sorted")
_EVENT_DECODER = msgspec.msgpack.Decoder(EventRecord)
_CHECKPOINT_DECODER = msgspec.msgpack.Decoder(CheckpointRecord)


def encode_record(record: EventRecord | CheckpointRecord) -> bytes:
    """MessagePack bytes of a record."""
    return _ENCODER.encode(record)


def decode_event(data: bytes) -> EventRecord:
    """Decode an event record (raises ``msgspec.DecodeError`` when malformed)."""
    return _EVENT_DECODER.decode(data)


def decode_checkpoint(data: bytes) -> CheckpointRecord:
    """Decode a checkpoint record (raises ``msgspec.DecodeError`` when malformed)."""
    return _CHECKPOINT_DECODER.decode(data)


def to_stored(record: EventRecord, payload: Any = None) -> StoredEvent:
    """The public view of a record (``payload``: its decoded payload, if already known)."""
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
