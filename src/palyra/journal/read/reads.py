"""Read paths over an open environment. Each function runs in one read txn.

Records are keyed by their last position and indexed by their last position
per session and their last tape_seq per run, so a cursor lands with one
``set_range`` on the record that holds the next wanted event; the readers then
skip that record's events at or before the cursor.
"""

from __future__ import annotations

from typing import Any

from palyra.core.chain import GENESIS
from palyra.core.errors import ErrorCode, InvalidArgument, PalyraError
from palyra.journal import _env as names
from palyra.journal._env import JournalEnv
from palyra.journal._types import ENTITY_TABLES, MAX_TAPE_PAGE, StoredEvent, TapePage
from palyra.journal.format.record import (
    TOMBSTONE_FORMAT,
    CheckpointRecord,
    Record,
    decode_checkpoint,
    decode_record,
    key_u64,
    record_hashes,
    scoped_key,
    scoped_prefix,
    u64_key,
)

_MAX_U64 = (1 << 64) - 1
_MAX_I64 = (1 << 63) - 1


def clamp_limit(limit: int, ceiling: int = MAX_TAPE_PAGE) -> int:
    """Clamp a page size to ``1..ceiling``."""
    return max(1, min(int(limit), ceiling))


def load_head(env: JournalEnv, txn: Any) -> tuple[int, bytes]:
    """(count, global head hash) of the log: the last record's last position and link."""
    cursor = txn.cursor(db=env.dbs[names.EVENTS])
    if not cursor.last():
        return 0, GENESIS
    return key_u64(cursor.key()), record_hashes(cursor.value())[1]


def pruned_through(env: JournalEnv, txn: Any) -> int:
    """The last position retention pruned (0 when nothing is).

    Tombstones are always a prefix of the log (``retention.prune``), so "the record
    holding position p is a tombstone" is monotone in p: a binary search over
    positions finds the boundary in O(log n) lookups.
    """
    cursor = txn.cursor(db=env.dbs[names.EVENTS])
    if not cursor.first() or cursor.value()[0] != TOMBSTONE_FORMAT:
        return 0
    low = key_u64(cursor.key())  # the last position of a tombstone
    if not cursor.last():
        return 0
    high = key_u64(cursor.key())
    if cursor.value()[0] == TOMBSTONE_FORMAT:
        return high
    # Invariant: ``low`` is the last position of a tombstone, the record holding
    # ``high`` is not one; positions between them are what is left to decide.
    while high - low > 1:
        mid = (low + high) // 2
        cursor.set_range(u64_key(mid))
        if cursor.value()[0] == TOMBSTONE_FORMAT:
            low = key_u64(cursor.key())
        else:
            high = mid
    return low


def truncated(what: str, cursor: int, earliest: int, **details: str) -> PalyraError:
    """``CURSOR_TRUNCATED``: the data after ``cursor`` was removed by retention."""
    return PalyraError(
        f"{what} cursor {cursor} points into data that retention pruned; the earliest "
        f"readable cursor is {earliest}",
        code=ErrorCode.CURSOR_TRUNCATED,
        details={"cursor": str(cursor), "earliest_cursor": str(earliest), **details},
    )


def last_scoped_number(txn: Any, db: Any, scope: str) -> int:
    """Largest u64 under ``scoped_prefix(scope)`` in ``db``, or -1."""
    prefix = scoped_prefix(scope)
    cursor = txn.cursor(db=db)
    found = cursor.set_range(scoped_key(scope, _MAX_U64))
    if found and cursor.key() == scoped_key(scope, _MAX_U64):
        return _MAX_U64
    if not (cursor.prev() if found else cursor.last()):
        return -1
    key = cursor.key()
    if len(key) == len(prefix) + 8 and key.startswith(prefix):
        return key_u64(key)
    return -1


def record_hash_at(txn: Any, env: JournalEnv, last: int) -> bytes:
    """The chain hash of the record stored under last position ``last``.

    Raises:
        PalyraError: no record there (an index points at a missing record).
    """
    raw = txn.get(u64_key(last), db=env.dbs[names.EVENTS])
    if raw is None:
        raise PalyraError(f"an index points at missing record {last}")
    return record_hashes(raw)[0]


def record_holding(env: JournalEnv, txn: Any, key: bytes) -> Record:
    """The record stored under ``key`` (a last position taken from an index).

    Raises:
        PalyraError: the index points at a missing record.
    """
    raw = txn.get(key, db=env.dbs[names.EVENTS])
    if raw is None:
        raise PalyraError(f"an index points at missing record {key_u64(key)}")
    return decode_record(raw)


def read_range(env: JournalEnv, after_position: int, limit: int) -> list[StoredEvent]:
    """Events with position > ``after_position``, oldest first.

    Raises:
        PalyraError: ``CURSOR_TRUNCATED`` when the next position was pruned.
    """
    limit = clamp_limit(limit)
    out: list[StoredEvent] = []
    if after_position >= _MAX_I64:
        return out
    after = max(0, after_position)
    with env.read() as txn:
        cursor = txn.cursor(db=env.dbs[names.EVENTS])
        if not cursor.set_range(u64_key(after + 1)):
            return out
        for _key, value in cursor:
            record = decode_record(value)
            if record.pruned:
                raise truncated("position", after, pruned_through(env, txn))
            events = record.events()
            if record.first <= after:
                events = events[after - record.first + 1 :]
            out.extend(events[: limit - len(out)])
            if len(out) >= limit:
                break
    return out


def read_session(
    env: JournalEnv, session_id: str, after_position: int, limit: int
) -> list[StoredEvent]:
    """Events of one session with position > ``after_position``, oldest first.

    Raises:
        PalyraError: ``CURSOR_TRUNCATED`` when the session's next event was pruned.
    """
    limit = clamp_limit(limit)
    prefix = scoped_prefix(session_id)
    out: list[StoredEvent] = []
    if after_position >= _MAX_I64:
        return out
    after = max(0, after_position)
    with env.read() as txn:
        cursor = txn.cursor(db=env.dbs[names.BY_SESSION])
        if not cursor.set_range(scoped_key(session_id, after + 1)):
            return out
        for key in cursor.iternext(keys=True, values=False):
            if len(key) != len(prefix) + 8 or not key.startswith(prefix):
                break
            record = record_holding(env, txn, key[-8:])
            if record.pruned:
                raise truncated("position", after, pruned_through(env, txn),
                                session_id=session_id)
            events = [e for e in record.events() if e.position > after]
            out.extend(events[: limit - len(out)])
            if len(out) >= limit:
                break
    return out


def read_tape(env: JournalEnv, run_id: str, after_seq: int, limit: int, max_bytes: int) -> TapePage:
    """One page of ``run_id``'s tape after ``after_seq`` (exclusive).

    Raises:
        PalyraError: ``RESOURCE_EXHAUSTED`` when the first event alone is
            larger than ``max_bytes``; ``CURSOR_TRUNCATED`` when the tape's
            next event was pruned (the message names the earliest readable seq).
    """
    limit = clamp_limit(limit)
    prefix = scoped_prefix(run_id)
    events: list[StoredEvent] = []
    used = 0
    more = False
    if after_seq >= _MAX_I64:
        return TapePage([], None)
    after = max(-1, after_seq)
    with env.read() as txn:
        cursor = txn.cursor(db=env.dbs[names.TAPE])
        if not cursor.set_range(scoped_key(run_id, after + 1)):
            return TapePage([], None)
        for key, value in cursor:
            if len(key) != len(prefix) + 8 or not key.startswith(prefix):
                break
            record = record_holding(env, txn, value)
            if record.pruned:
                raise truncated("tape", after, _tape_pruned_through(env, txn, run_id, key),
                                run_id=run_id)
            for event, size in record.sized_events():
                if event.run_id != run_id or event.tape_seq <= after:
                    continue
                if len(events) >= limit:
                    more = True
                    break
                if used + size > max_bytes:
                    if not events:
                        raise PalyraError(
                            f"tape event {event.tape_seq} of run {run_id} is {size} bytes, over "
                            f"the {max_bytes}-byte response cap",
                            code=ErrorCode.RESOURCE_EXHAUSTED,
                            details={"tape_seq": str(event.tape_seq), "max_bytes": str(max_bytes)},
                        )
                    more = True
                    break
                used += size
                events.append(event)
            if more:
                break
    return TapePage(events, events[-1].tape_seq if more and events else None)


def _tape_pruned_through(env: JournalEnv, txn: Any, run_id: str, key: bytes) -> int:
    """The highest pruned tape seq of ``run_id``, from its index key ``key`` on.

    Tape index keys of pruned records are kept (they say which seqs a
    tombstone held), so this walks them until the first unpruned record.
    """
    prefix = scoped_prefix(run_id)
    cursor = txn.cursor(db=env.dbs[names.TAPE])
    seq = key_u64(key)
    if not cursor.set_key(key):
        return seq
    for index_key, last in cursor:
        if len(index_key) != len(prefix) + 8 or not index_key.startswith(prefix):
            break
        if record_holding(env, txn, last).pruned:
            seq = key_u64(index_key)
        else:
            break
    return seq


def last_tape_seq(env: JournalEnv, run_id: str) -> int:
    """Highest ``tape_seq`` of ``run_id``, or -1."""
    with env.read() as txn:
        return last_scoped_number(txn, env.dbs[names.TAPE], run_id)


def _table(env: JournalEnv, table: str) -> Any:
    if table not in ENTITY_TABLES:
        raise InvalidArgument(f"unknown entity table {table!r}", details={"table": table})
    return env.dbs[table]


def get_entity(env: JournalEnv, table: str, key: str, *, wait: bool = True) -> bytes | None:
    """One entity value, or None (``wait=False``: the caller knows LMDB holds the row's
    latest write, so frames still being applied need not land first)."""
    db = _table(env, table)
    if not key:
        return None
    with env.read(wait=wait) as txn:
        value = txn.get(key.encode("utf-8"), db=db)
    return bytes(value) if value is not None else None


def scan_entities(
    env: JournalEnv, table: str, prefix: str, after_key: str, limit: int
) -> list[tuple[str, bytes]]:
    """Rows whose key starts with ``prefix`` and sorts after ``after_key``, in key order."""
    db = _table(env, table)
    limit = clamp_limit(limit, 10_000)
    raw_prefix = prefix.encode("utf-8")
    start = max(raw_prefix, after_key.encode("utf-8"))
    out: list[tuple[str, bytes]] = []
    with env.read() as txn:
        cursor = txn.cursor(db=db)
        if not cursor.set_range(start or b"\x00"):
            return out
        for key, value in cursor:
            if not key.startswith(raw_prefix):
                break
            if after_key and key <= after_key.encode("utf-8"):
                continue
            out.append((key.decode("utf-8"), bytes(value)))
            if len(out) >= limit:
                break
    return out


def scan_entities_before(
    env: JournalEnv, table: str, before_key: str, limit: int
) -> list[tuple[str, bytes]]:
    """Rows whose key sorts before ``before_key`` (every row when empty), in descending
    key order: newest first for ULID-keyed tables."""
    db = _table(env, table)
    limit = clamp_limit(limit, 10_000)
    bound = before_key.encode("utf-8")
    out: list[tuple[str, bytes]] = []
    with env.read() as txn:
        cursor = txn.cursor(db=db)
        # Position on the first key >= bound (or the last row), then step back past it.
        found = cursor.set_range(bound) if bound else cursor.last()
        if not found:
            found = cursor.last()
        while found and len(out) < limit:
            key = bytes(cursor.key())
            if not bound or key < bound:
                out.append((key.decode("utf-8"), bytes(cursor.value())))
            found = cursor.prev()
    return out


def last_checkpoint(env: JournalEnv) -> CheckpointRecord | None:
    """The stored checkpoint of the highest position, or None."""
    with env.read() as txn:
        cursor = txn.cursor(db=env.dbs[names.CHECKPOINTS])
        return decode_checkpoint(cursor.value()) if cursor.last() else None


def checkpoints(env: JournalEnv) -> list[CheckpointRecord]:
    """Every stored checkpoint, by position."""
    with env.read() as txn:
        cursor = txn.cursor(db=env.dbs[names.CHECKPOINTS])
        return [decode_checkpoint(value) for _key, value in cursor]
