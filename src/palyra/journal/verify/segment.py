"""One segment of the chain checked on its own, for a verify spread over processes; pure.

Records carry the hashes that link them (their session's previous record hash and
the global hash after them), so a run of consecutive records can be checked without
the records before it: everything inside the run is checked here, exactly as the
serial walk's fast path checks it (``chainwalk.ChainVerifier.stored_run``), and what
depends on the records before it is returned for the parent to join at the seam:

* the first record's position, key, hash and stated global hash (its link is the
  hash of the head before it with these, which only the parent knows);
* for each session, the ``prev_hash`` of its first record in the run (the parent
  holds it to the session's head before the run) and the hash of its last;
* the global hash after each record a signed checkpoint names (the parent checks
  the signature against it), and the records holding a compaction.

A run holding anything else (a tombstone, a format 1 record, a retention record, a
record that does not check out) is not judged here: :func:`check_segment` says so
(``ok`` false) and the parent walks that run with the serial verifier, which names
the first failure exactly as a serial verify does. The run's transparency-log
values come back too: its level-0 rows (record hash ‖ u64 last) and, from
``tlog.merkle.fold_block``, its tree nodes.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from palyra.core.chain import LINK_TAG
from palyra.journal.format.record import (
    FIRST_AT,
    FRONT,
    GLOBAL_AT,
    HASH_AT,
    HASHED_AT,
    PREV_AT,
    RECORD_FORMAT,
    RETENTION_SESSION,
    SESSION_AT,
)

_EMPTY = hashlib.sha256()
_LINK = hashlib.sha256(LINK_TAG)  # copying a started hash is cheaper than starting one
_FRONT_UNPACK = FRONT.unpack_from
_U64_PACK = struct.Struct(">Q").pack
_RETENTION = RETENTION_SESSION.encode("utf-8")


@dataclass(slots=True)
class Segment:
    """What a run of records gave; see the module. Unset fields mean nothing was read."""

    ok: bool = True
    records: int = 0
    events: int = 0
    first: int = 0  # the first record's first position
    last: int = 0  # the last record's last position
    entry: tuple[bytes, bytes, bytes] = (b"", b"", b"")  # first record: key, hash, global hash
    head: bytes = b""  # the global hash after the last record
    opened: dict[bytes, bytes] = field(default_factory=dict)  # session -> first prev_hash
    heads: dict[bytes, bytes] = field(default_factory=dict)  # session -> last record hash
    stops: dict[int, tuple[int, bytes]] = field(default_factory=dict)  # asked -> (last, head)
    noted: list[bytes] = field(default_factory=list)  # records holding the marker
    rows: list[bytes] = field(default_factory=list)  # level-0 tree values, in log order
    # Set by the worker (``verify.parallel``): whether the stored level-0 rows are the
    # ones its records give, the roots of its leaves (``merkle.fold_block``), the tile
    # rows inside its block (the parent compares them) and the roots of its leaves
    # before a signed size inside it.
    tree_ok: bool = False
    roots: list[bytes] = field(default_factory=list)
    nodes: list[tuple[bytes, bytes]] = field(default_factory=list)  # tile rows inside
    signed_roots: list[bytes] = field(default_factory=list)


def check_segment(
    records: Iterable[tuple[bytes, bytes]], *, marker: bytes, asked: Sequence[int] = (),
) -> Segment:  # fmt: skip
    """Check a run of stored ``(key, value)`` records (see the module).

    ``asked``: positions (ascending) at which signed checkpoints sit: each gets the
    last position and global hash of the first record ending at or after it.
    """
    seg = Segment()
    heads, opened, stops, noted, rows = seg.heads, seg.opened, seg.stops, seg.noted, seg.rows
    position, head, events, count = -1, b"", 0, 0
    ask = next(waiting := iter(asked), None)
    for key, value in records:
        if value[0] != RECORD_FORMAT or len(value) <= SESSION_AT:
            seg.ok = False
            return seg
        first, count, session_len = _FRONT_UNPACK(value, FIRST_AT)
        end = SESSION_AT + session_len
        last = first + count - 1
        if not (
            (position < 0 or first == position + 1)
            and end < len(value)
            and value[end] - 0x90 == count  # a fixarray of `count` >= 1 events
            and count > 0
            and key == _U64_PACK(last)
        ):
            seg.ok = False
            return seg
        hasher = _EMPTY.copy()
        hasher.update(value[HASHED_AT:])
        digest = hasher.digest()
        session = value[SESSION_AT:end]
        before = heads.get(session)
        if (not value.startswith(digest, HASH_AT) or session == _RETENTION
                or (before is not None and not value.startswith(before, PREV_AT))):  # fmt: skip
            seg.ok = False
            return seg
        if before is None:
            opened[session] = value[PREV_AT : PREV_AT + 32]
        if position < 0:  # the parent links it: it knows the head before the run
            head, seg.first = value[GLOBAL_AT : GLOBAL_AT + 32], first
            seg.entry = (key, digest, head)
        else:
            hasher = _LINK.copy()
            hasher.update(head + key + digest)
            head = hasher.digest()
            if not value.startswith(head, GLOBAL_AT):
                seg.ok = False
                return seg
        heads[session] = digest
        position = last
        events += count
        rows.append(digest + key)
        if marker in value:  # a compaction: its digests are checked by the parent
            noted.append(value)
        while ask is not None and ask <= last:
            stops[ask] = (last, head)
            ask = next(waiting, None)
    seg.records, seg.events, seg.last, seg.head = len(rows), events, max(position, 0), head
    return seg
