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
from collections.abc import Callable, Sequence
from typing import Any

from palyra.core.event_header import HEADER_LAYOUT, EventHeader, HashAs, header_values

HASH_LEN = 32
GENESIS = bytes(HASH_LEN)
"""The previous hash of the first event of a session and of the first link."""

EVENT_TAG = b"palyra.journal.event.v1\x00"
LINK_TAG = b"palyra.journal.link.v1\x00"
CHECKPOINT_TAG = b"palyra.journal.checkpoint.v1\x00"
SEAL_TAG = b"palyra.journal.bundle-seal.v1\x00"

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


def seal_message(
    scope: str,
    session_id: str,
    head_position: int,
    head: bytes,
    session_head: bytes,
    session_events: int,
    ts_ms: int,
) -> bytes:
    """Bytes signed by a bundle seal (the exporter's signature over what it exported).

    ``SEAL_TAG || text(scope) || text(session_id) || u64(head_position) || head(32)
    || session_head(32) || u64(session_events) || i64(ts_ms)``. For a session
    bundle, ``session_head`` and ``session_events`` are the session's last event
    hash and event count at ``head_position``: the seal proves the bundle holds
    every event of the session up to there. A full bundle uses GENESIS and 0.
    """
    if len(head) != HASH_LEN or len(session_head) != HASH_LEN:
        raise ValueError("seal heads must be 32-byte hashes")
    return (SEAL_TAG + _text(scope) + _text(session_id) + _U64.pack(head_position) + head
            + session_head + _U64.pack(session_events) + _I64.pack(ts_ms))
