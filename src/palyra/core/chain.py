"""Hash chain of the journal: exact byte layouts, pure functions, no I/O.

The journal is a sequence of records; a record holds one or more events at
consecutive positions, all of one session. Two chains (see ``docs/journal/format.md``
for the rationale and the byte layouts):

* **Session chain.** ``record_hash`` covers every field of every event of the
  record (header fields, redaction list, redacted canonical payload) and links
  to the hash of the previous record *of the same session* (``session_id``
  ``""`` is a session of its own). A session can be exported, verified or moved
  to another shard without touching any other session's hashes.
* **Global link chain.** ``link_hash = H(prev_link || last position || record hash)``
  orders all records. It carries no content, so a session export can include
  the links of foreign records and still be checked end to end against
  signed checkpoints.

Journals written before format 2 hold one event per record, hashed with
:func:`event_hash` (``EVENT_TAG``); format 2 records are hashed with
:func:`record_hash` (``RECORD_TAG``). Both chain the same way, so one journal
may hold both.

Encoding primitives (all integers big-endian):

* ``u32(n)``, ``u64(n)``: unsigned, 4 and 8 bytes;
* ``i64(n)``: two's complement signed, 8 bytes;
* ``text(s) = u32(len(utf8(s))) || utf8(s)``;
* ``blob(b) = u32(len(b)) || b``.
"""

from __future__ import annotations

import hashlib
import operator
import struct
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from palyra.core.event_header import (
    HEADER_LAYOUT,
    RECORD_EVENT_FIELDS,
    EventHeader,
    HashAs,
    header_values,
)

HASH_LEN = 32
GENESIS = bytes(HASH_LEN)
"""The previous hash of the first event of a session and of the first link."""

EVENT_TAG = b"palyra.journal.event.v1\x00"
RECORD_TAG = b"palyra.journal.record.v2\x00"
LINK_TAG = b"palyra.journal.link.v1\x00"
CHECKPOINT_TAG = b"palyra.journal.checkpoint.v1\x00"
SEAL_TAG = b"palyra.journal.bundle-seal.v1\x00"
SEAL_TAG_V2 = b"palyra.journal.bundle-seal.v2\x00"

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")


def _text(value: str) -> bytes:
    raw = value.encode("utf-8")
    return _U32.pack(len(raw)) + raw


def _blob(value: bytes) -> bytes:
    return _U32.pack(len(value)) + value


_ENCODERS: dict[HashAs, Callable[[Any], bytes]] = {
    HashAs.U64: _U64.pack,
    HashAs.I64: _I64.pack,
    HashAs.TEXT: _text,
}
# One encoder per header field, in the order the header declares them.
_HEADER_ENCODERS = tuple(_ENCODERS[wire] for _, wire in HEADER_LAYOUT)


def event_preimage(
    prev_session_hash: bytes,
    header: EventHeader,
    redactions: Sequence[str],
    payload: bytes,
) -> bytes:
    """The exact bytes hashed into ``event_hash``.

    Layout::

        EVENT_TAG || prev_session_hash(32) || u64(position) || text(event_id)
        || text(session_id) || text(run_id) || i64(tape_seq) || text(kind)
        || text(actor) || i64(ts_ms) || text(principal) || text(device_id)
        || text(channel) || u32(len(redactions)) || text(path)...
        || blob(canonical payload)

    The header part follows ``palyra.core.event_header.HEADER_LAYOUT``;
    ``header`` may be any shape that subclasses :class:`EventHeader`.
    """
    if len(prev_session_hash) != HASH_LEN:
        raise ValueError("prev_session_hash must be 32 bytes")
    parts = [
        EVENT_TAG,
        prev_session_hash,
        *[
            encode(value)
            for encode, value in zip(_HEADER_ENCODERS, header_values(header), strict=True)
        ],
        _U32.pack(len(redactions)),
        *(_text(path) for path in redactions),
        _blob(payload),
    ]
    return b"".join(parts)


def event_hash(
    prev_session_hash: bytes,
    header: EventHeader,
    redactions: Sequence[str],
    payload: bytes,
) -> bytes:
    """SHA-256 of :func:`event_preimage`."""
    return hashlib.sha256(event_preimage(prev_session_hash, header, redactions, payload)).digest()


def record_head(
    prev_session_hash: bytes, first_position: int, count: int, session_id: str
) -> bytes:
    """The fixed front of a record's hashed bytes.

    Layout::

        RECORD_TAG || prev_session_hash(32) || u64(first_position) || u32(count)
        || text(session_id)

    ``prev_session_hash`` is the hash of the session's previous record
    (``GENESIS`` for its first).
    """
    if len(prev_session_hash) != HASH_LEN:
        raise ValueError("prev_session_hash must be 32 bytes")
    if count < 1:
        raise ValueError("a record holds at least one event")
    return record_head_of(prev_session_hash, first_position, count, text_bytes(session_id))


_FIRST_COUNT = struct.Struct(">QI")


def text_bytes(value: str) -> bytes:
    """``text(value)`` of the hash layouts: ``u32(len(utf8)) || utf8``."""
    return _text(value)


def record_head_of(
    prev_session_hash: bytes, first_position: int, count: int, session_text: bytes
) -> bytes:
    """:func:`record_head` with ``text(session_id)`` given (``text_bytes``) and unchecked.

    For the writer, which keeps each session's text between records and whose
    ``prev_session_hash`` and ``count`` are right by construction.
    """
    return b"".join(
        (RECORD_TAG, prev_session_hash, _FIRST_COUNT.pack(first_position, count), session_text)
    )


_ROW_VALUES = operator.attrgetter(*RECORD_EVENT_FIELDS)
_BODY = msgspec.msgpack.Encoder(order="sorted")


def record_row(
    header: EventHeader, tape_seq: int, redactions: Sequence[str], payload: bytes
) -> list[Any]:
    """One event's entry in a record body.

    ``[event_id, run_id, tape_seq, kind, actor, ts_ms, principal, device_id,
    channel, [redaction paths], payload]`` (``RECORD_EVENT_FIELDS``, then the
    redaction list, then the canonical payload map embedded as it is).
    ``tape_seq`` overrides the header's, which a prepared event does not know yet.
    """
    values = _ROW_VALUES(header)
    return [values[0], values[1], tape_seq, *values[3:], list(redactions), msgspec.Raw(payload)]


def record_body(rows: Sequence[list[Any]]) -> bytes:
    """Canonical MessagePack array of :func:`record_row` entries, in position order."""
    return _BODY.encode(rows)


def record_hash(head: bytes, body: bytes) -> bytes:
    """``SHA-256(record_head || record_body)``: the session chain hash of a record."""
    digest = hashlib.sha256(head)
    digest.update(body)  # no copy of the body into one pre-image
    return digest.digest()


def link_hash(prev_link: bytes, position: int, event_digest: bytes) -> bytes:
    """Global chain: ``SHA-256(LINK_TAG || prev_link(32) || u64(position) || hash(32))``.

    ``position`` is the last position of the record and ``event_digest`` its
    hash (a format 1 record is one event: its position and its ``event_hash``).
    """
    if len(prev_link) != HASH_LEN or len(event_digest) != HASH_LEN:
        raise ValueError("link inputs must be 32-byte hashes")
    return hashlib.sha256(LINK_TAG + prev_link + _U64.pack(position) + event_digest).digest()


def checkpoint_message(position: int, head: bytes, ts_ms: int) -> bytes:
    """Bytes signed by a checkpoint: ``CHECKPOINT_TAG || u64(position) || head(32) || i64(ts_ms)``.

    ``head`` is the global link hash at ``position`` (``GENESIS`` when 0).
    """
    if len(head) != HASH_LEN:
        raise ValueError("checkpoint head must be a 32-byte hash")
    return CHECKPOINT_TAG + _U64.pack(position) + head + _I64.pack(ts_ms)


def seal_message(
    scope: str,
    session_id: str,
    head_position: int,
    head: bytes,
    session_head: bytes,
    session_events: int,
    ts_ms: int,
    lines_sha256: bytes | None = None,
) -> bytes:
    """Bytes signed by a bundle seal (the exporter's signature over what it exported).

    ``SEAL_TAG || text(scope) || text(session_id) || u64(head_position) || head(32)
    || session_head(32) || u64(session_events) || i64(ts_ms)``. For a session
    bundle, ``session_head`` and ``session_events`` are the session's last event
    hash and event count at ``head_position``: the seal proves the bundle holds
    every event of the session up to there. A full bundle uses GENESIS and 0.

    Version 5 bundles seal every byte before the seal line too: with
    ``lines_sha256`` (the SHA-256 of those bytes) the message is ``SEAL_TAG_V2`` and
    the same fields followed by ``lines_sha256(32)``, so no field of any line (a
    tombstone's session and ``prev_hash``, which no hash covers; the header's export
    time) can change under the seal.
    """
    if len(head) != HASH_LEN or len(session_head) != HASH_LEN:
        raise ValueError("seal heads must be 32-byte hashes")
    if lines_sha256 is not None and len(lines_sha256) != HASH_LEN:
        raise ValueError("the sealed lines' digest must be 32 bytes")
    fields = (_text(scope) + _text(session_id) + _U64.pack(head_position) + head
              + session_head + _U64.pack(session_events) + _I64.pack(ts_ms))
    if lines_sha256 is None:
        return SEAL_TAG + fields
    return SEAL_TAG_V2 + fields + lines_sha256
