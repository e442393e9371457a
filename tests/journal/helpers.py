"""Shared helpers for journal tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lmdb

from palyra.journal import EventDraft
from palyra.journal._env import EVENTS, journal_dir
from palyra.journal._record import decode_event, encode_record, u64_key


def draft(i: int = 0, **kw: Any) -> EventDraft:
    """A small draft whose payload names ``i``."""
    fields: dict[str, Any] = {"kind": "test.event", "actor": "tester", "payload": {"i": i}}
    fields.update(kw)
    return EventDraft(**fields)


def rewrite_record(data_dir: Path, position: int, **changes: Any) -> None:
    """Tamper with a stored record directly in LMDB (the store must be closed)."""
    env = lmdb.open(str(journal_dir(data_dir)), max_dbs=32)
    try:
        db = env.open_db(EVENTS.encode())
        with env.begin(write=True) as txn:
            raw = txn.get(u64_key(position), db=db)
            assert raw is not None
            record = decode_event(raw)
            txn.put(u64_key(position), encode_record(_replace(record, **changes)), db=db)
    finally:
        env.close()


def raw_record(data_dir: Path, position: int, value: bytes | None = None) -> bytes:
    """Read (and optionally overwrite, None deletes nothing) a record's raw bytes."""
    env = lmdb.open(str(journal_dir(data_dir)), max_dbs=32)
    try:
        db = env.open_db(EVENTS.encode())
        with env.begin(write=value is not None) as txn:
            found = txn.get(u64_key(position), db=db)
            assert found is not None
            old = bytes(found)
            if value is not None:
                txn.put(u64_key(position), value, db=db)
        return old
    finally:
        env.close()


def delete_records(data_dir: Path, positions: list[int]) -> None:
    """Remove records from the log (the store must be closed)."""
    env = lmdb.open(str(journal_dir(data_dir)), max_dbs=32)
    try:
        db = env.open_db(EVENTS.encode())
        with env.begin(write=True) as txn:
            for position in positions:
                txn.delete(u64_key(position), db=db)
    finally:
        env.close()


def _replace(record: Any, **changes: Any) -> Any:
    import msgspec

    return msgspec.structs.replace(record, **changes)
