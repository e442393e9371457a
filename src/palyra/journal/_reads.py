"""Read paths over an open environment. Each function runs in one read txn."""

from __future__ import annotations

from typing import Any

from palyra.core.chain import GENESIS
from palyra.core.errors import ErrorCode, InvalidArgument, PalyraError
from palyra.journal import _env as names
from palyra.journal._env import JournalEnv
from palyra.journal._record import (
    CheckpointRecord,
    EventRecord,
    decode_checkpoint,
    decode_event,
    key_u64,
    scoped_key,
    scoped_prefix,
    to_stored,
    u64_key,
)
from palyra.journal._types import ENTITY_TABLES, MAX_TAPE_PAGE, StoredEvent, TapePage

_MAX_U64 = (1 << 64) - 1
_MAX_I64 = (1 << 63) - 1


def clamp_limit(limit: int, ceiling: int = MAX_TAPE_PAGE) -> int:
    """Clamp a page size to ``1..ceiling``."""
    return max(1, min(int(limit), ceiling))


def load_head(env: JournalEnv, txn: Any) -> tuple[int, bytes]:
    """(count, global head hash) of the log."""
    cursor = txn.cursor(db=env.dbs[names.EVENTS])
    if not cursor.last():
        return 0, GENESIS
    record = decode_event(cursor.value())
    return record.position, record.global_hash


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


def record_at(env: JournalEnv, txn: Any, position: int) -> EventRecord | None:
    """The record at ``position``, or None."""
    raw = txn.get(u64_key(position), db=env.dbs[names.EVENTS])
    return decode_event(raw) if raw is not None else None


def read_range(env: JournalEnv, after_position: int, limit: int) -> list[StoredEvent]:
    """Events with position > ``after_position``, oldest first."""
    limit = clamp_limit(limit)
    out: list[StoredEvent] = []
    if after_position >= _MAX_I64:
        return out
    with env.read() as txn:
        cursor = txn.cursor(db=env.dbs[names.EVENTS])
        if not cursor.set_range(u64_key(max(0, after_position) + 1)):
            return out
        for _key, value in cursor:
            out.append(to_stored(decode_event(value)))
            if len(out) >= limit:
                break
    return out


def read_session(
    env: JournalEnv, session_id: str, after_position: int, limit: int
) -> list[StoredEvent]:
    """Events of one session with position > ``after_position``, oldest first."""
    limit = clamp_limit(limit)
    prefix = scoped_prefix(session_id)
    out: list[StoredEvent] = []
    if after_position >= _MAX_I64:
        return out
    with env.read() as txn:
        cursor = txn.cursor(db=env.dbs[names.BY_SESSION])
        if not cursor.set_range(scoped_key(session_id, max(0, after_position) + 1)):
            return out
        for key in cursor.iternext(keys=True, values=False):
            if len(key) != len(prefix) + 8 or not key.startswith(prefix):
                break
            record = record_at(env, txn, key_u64(key))
            if record is not None:
                out.append(to_stored(record))
            if len(out) >= limit:
                break
    return out


def read_tape(env: JournalEnv, run_id: str, after_seq: int, limit: int, max_bytes: int) -> TapePage:
    """One page of ``run_id``'s tape after ``after_seq`` (exclusive).

    Raises:
        PalyraError: ``RESOURCE_EXHAUSTED`` when the first event alone is
            larger than ``max_bytes``.
    """
    limit = clamp_limit(limit)
    prefix = scoped_prefix(run_id)
    events: list[StoredEvent] = []
    used = 0
    more = False
    if after_seq >= _MAX_I64:
        return TapePage([], None)
    with env.read() as txn:
        cursor = txn.cursor(db=env.dbs[names.TAPE])
        if not cursor.set_range(scoped_key(run_id, max(-1, after_seq) + 1)):
            return TapePage([], None)
        for key, value in cursor:
            if len(key) != len(prefix) + 8 or not key.startswith(prefix):
                break
            if len(events) >= limit:
                more = True
                break
            raw = txn.get(value, db=env.dbs[names.EVENTS])
            if raw is None:
                raise PalyraError(f"tape index of run {run_id} points at a missing event")
            if used + len(raw) > max_bytes:
                if not events:
                    raise PalyraError(
                        f"tape event {key_u64(key)} of run {run_id} is {len(raw)} bytes, over "
                        f"the {max_bytes}-byte response cap",
                        code=ErrorCode.RESOURCE_EXHAUSTED,
                        details={"tape_seq": str(key_u64(key)), "max_bytes": str(max_bytes)},
                    )
                more = True
                break
            used += len(raw)
            events.append(to_stored(decode_event(raw)))
    return TapePage(events, events[-1].tape_seq if more and events else None)


def last_tape_seq(env: JournalEnv, run_id: str) -> int:
    """Highest ``tape_seq`` of ``run_id``, or -1."""
    with env.read() as txn:
        return last_scoped_number(txn, env.dbs[names.TAPE], run_id)


def _table(env: JournalEnv, table: str) -> Any:
    if table not in ENTITY_TABLES:
        raise InvalidArgument(f"unknown entity table {table!r}", details={"table": table})
    return env.dbs[table]


def get_entity(env: JournalEnv, table: str, key: str) -> bytes | None:
    """One entity value, or None."""
    db = _table(env, table)
    if not key:
        return None
    with env.read() as txn:
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


def checkpoints(env: JournalEnv) -> list[CheckpointRecord]:
    """Every stored checkpoint, by position."""
    with env.read() as txn:
        cursor = txn.cursor(db=env.dbs[names.CHECKPOINTS])
        return [decode_checkpoint(value) for _key, value in cursor]
