"""Hash chain of the journal: exact byte layouts, pure functions, no I/O.

Two chains (see ``docs/journal.md`` for the rationale):

* **Session chain.** ``event_hash`` covers the event's header fields, its
  redaction list and its redacted canonical payload, and links to the
  ``event_hash`` of the previous event *of the same session* (``session_id``
  ``""`` is a session of its own). A session can be exported, verified or moved
  to another shard without touching any other session's hashes.
* **Global link chain.** ``link_hash = H(prev_link || position || event_hash)``
  orders all events. It carries no content, so a session export can include
  the links of foreign positions and still be checked end to end against
  signed checkpoints.

Encoding primitives (all integers big-endian):

* ``u32(n)``, ``u64(n)``: unsigned, 4 and 8 bytes;
* ``i64(n)``: two's complement signed, 8 bytes;
* ``text(s) = u32(len(utf8(s))) || utf8(s)``;
* ``blob(b) = u32(len(b)) || b``.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

HASH_LEN = 32
GENESIS = bytes(HASH_LEN)
"""The previous hash of the first event of a session and of the first link."""

EVENT_TAG = b"palyra.journal.event.v1\x00"
LINK_TAG = b"palyra.journal.link.v1\x00"
CHECKPOINT_TAG = b"palyra.journal.checkpoint.v1\x00"

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class EventHeader:
    """Every hashed field of an event other than the payload bytes."""

    position: int
    event_id: str
    session_id: str
    run_id: str
    tape_seq: int
    kind: str
    actor: str
    ts_ms: int
    principal: str
    device_id: str
    channel: str


def _text(value: str) -> bytes:
    raw = value.encode("utf-8")
    return _U32.pack(len(raw)) + raw


def _blob(value: bytes) -> bytes:
    return _U32.pack(len(value)) + value


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
    """
    if len(prev_session_hash) != HASH_LEN:
        raise ValueError("prev_session_hash must be 32 bytes")
    parts = [
        EVENT_TAG,
        prev_session_hash,
        _U64.pack(header.position),
        _text(header.event_id),
        _text(header.session_id),
        _text(header.run_id),
        _I64.pack(header.tape_seq),
        _text(header.kind),
        _text(header.actor),
        _I64.pack(header.ts_ms),
        _text(header.principal),
        _text(header.device_id),
        _text(header.channel),
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


def link_hash(prev_link: bytes, position: int, event_digest: bytes) -> bytes:
    """Global chain: ``SHA-256(LINK_TAG || prev_link(32) || u64(position) || event_hash(32))``."""
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
