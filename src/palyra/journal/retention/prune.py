"""Retention: turn the oldest records into hash tombstones, inside the writer's txn.

What is pruned is always a *prefix* of the log: the records after the last
tombstone, oldest first, while each one

* ends at or before ``through`` (the head when the prune was asked for, so a
  run that started afterwards can never be touched) and is not the newest
  record of the log;
* holds no event newer than ``before_ms``;
* holds no event of a run in ``live_runs`` (a run in progress or waiting for
  approval keeps its whole tape: recovery folds it from seq 0).

The first record that fails any of these ends the prune. A prefix keeps every
cursor simple (everything at or below one position is gone, nothing above it
is) and lets the verifier require that tombstones form a prefix, so a record
turned into a tombstone further on is reported as tampering. The price: a run
left waiting for weeks holds retention back behind its first record.

Each tombstone keeps its record's key, session, positions and three hashes
(``_record.encode_tombstone``), so both chains verify through it. The index
entries (``_event_ids``, ``_by_session``, ``_tape``) are kept: they are a few
dozen bytes per event against the payloads that go, and keeping them means an
``event_id`` stays taken forever (idempotent appends), the writer still finds
a session's chain head and a run's next tape seq through them, and a tape or
session cursor into pruned data lands on a tombstone and is answered
``CURSOR_TRUNCATED`` instead of silently skipping to later events.

The same transaction appends a ``journal.pruned`` event (session
:data:`RETENTION_SESSION`, not on any tape) stating the pruned range and the
global hash at its end, so the act is itself on the chain: the verifier
requires the latest such claim to match the tombstones exactly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import msgspec

from palyra.journal import _env as names
from palyra.journal._env import JournalEnv
from palyra.journal.format.record import (
    EventRecord,
    Record,
    decode_record,
    encode_tombstone,
    u64_key,
)


@dataclass(frozen=True, slots=True)
class PruneOrder:
    """One batch of retention, executed by the writer.

    Attributes:
        before_ms: prune only records whose every event is older (``ts_ms <``).
        through: never prune past this position.
        live_runs: runs whose events must stay (not terminal).
        max_records: most records one batch turns into tombstones.
    """

    before_ms: int
    through: int
    live_runs: frozenset[str] = frozenset()
    max_records: int = 512


@dataclass(frozen=True, slots=True)
class PruneResult:
    """What one prune batch (or a whole prune) did.

    Attributes:
        first: first position pruned (0 when nothing was).
        through: last position pruned now, or the earlier watermark when nothing was.
        records: records turned into tombstones.
        events: positions pruned.
        bytes_freed: stored record bytes dropped (the file does not shrink:
            LMDB reuses the pages).
        head_hash: hex global hash at ``through``.
        position: position of the ``journal.pruned`` event (0 when nothing was pruned).
    """

    first: int
    through: int
    records: int
    events: int
    bytes_freed: int
    head_hash: str
    position: int = 0


class _Age(msgspec.Struct, array_like=True, frozen=True):
    """The leading fields of a format 2 event array (the rest is not decoded)."""

    event_id: str
    run_id: str
    tape_seq: int
    kind: str
    actor: str
    ts_ms: int


_AGES = msgspec.msgpack.Decoder(list[_Age])


def _prunable(record: Record, order: PruneOrder) -> bool:
    if isinstance(record.body, EventRecord):
        rows = [(record.body.run_id, record.body.ts_ms)]
    else:
        rows = [(row.run_id, row.ts_ms) for row in _AGES.decode(record.body)]
    return all(ts < order.before_ms and run not in order.live_runs for run, ts in rows)


@dataclass(slots=True)
class Tombstoned:
    """The tombstones one batch wrote, for the ``journal.pruned`` event."""

    first: int
    last: int
    records: int
    bytes_freed: int
    global_hash: bytes


def tombstone_prefix(
    env: JournalEnv, txn: Any, watermark: int, head: int, order: PruneOrder
) -> Tombstoned | None:
    """Rewrite the prunable records after ``watermark`` as tombstones (in ``txn``).

    ``head`` is the log's last position (its record is never pruned). Returns
    None when the next record may not be pruned yet.
    """
    db = env.dbs[names.EVENTS]
    ceiling = min(order.through, head - 1)
    now_ms = time.time_ns() // 1_000_000
    # Only the small tombstones are held (a record may be up to ~1 MiB): the
    # memory of a batch stays a few dozen KiB whatever it prunes.
    picked: list[tuple[bytes, bytes]] = []
    freed = first = last = 0
    global_hash = b""
    cursor = txn.cursor(db=db)
    if cursor.set_range(u64_key(watermark + 1)):
        for key, value in cursor:
            if len(picked) >= order.max_records:
                break
            record = decode_record(value)
            if record.pruned:  # cannot happen (tombstones are a prefix); never rewrite one
                break
            if record.last > ceiling or not _prunable(record, order):
                break
            tomb = encode_tombstone(record, now_ms)
            picked.append((bytes(key), tomb))
            freed += len(value) - len(tomb)
            first = first or record.first
            last, global_hash = record.last, record.global_hash
    if not picked:
        return None
    for key, tomb in picked:
        # Delete, then put: a delete lets LMDB merge the leaf pages it empties
        # (an in-place put of a smaller value leaves them as sparse as they
        # were: measured, 20k events of ~150 B kept 962 of 962 pages in place
        # against 349 after delete+put). Both go into the same commit frame.
        txn.delete(key, db=db)
        txn.put(key, tomb, db=db)
    return Tombstoned(first, last, len(picked), freed, global_hash)
