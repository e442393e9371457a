"""Shared helpers for journal tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lmdb
import msgspec

from palyra.core.canonical import canonical_bytes
from palyra.core.chain import record_body, record_hash
from palyra.core.event_header import RECORD_EVENT_FIELDS
from palyra.journal import EventDraft
from palyra.journal._env import EVENTS, journal_dir
from palyra.journal.format.record import HASHED_AT, decode_record, is_format2, u64_key


def draft(i: int = 0, **kw: Any) -> EventDraft:
    """A small draft whose payload names ``i``."""
    fields: dict[str, Any] = {"kind": "test.event", "actor": "tester", "payload": {"i": i}}
    fields.update(kw)
    return EventDraft(**fields)


def rewrite_record(data_dir: Path, position: int, *, rehash: bool = False, **changes: Any) -> None:
    """Tamper with the event at ``position`` inside its stored record (the store must be closed).

    ``changes`` name event fields (``payload`` as canonical bytes). The record
    keeps its stored hashes unless ``rehash``, which recomputes its own hash
    (as an attacker would) but leaves the global link alone.
    """
    env = lmdb.open(str(journal_dir(data_dir)), max_dbs=32)
    try:
        db = env.open_db(EVENTS.encode())
        with env.begin(write=True) as txn:
            cursor = txn.cursor(db=db)
            assert cursor.set_range(u64_key(position))
            key, raw = cursor.key(), bytes(cursor.value())
            record = decode_record(raw)
            assert is_format2(raw) and isinstance(record.body, bytes)
            rows = msgspec.msgpack.decode(record.body)
            row = rows[position - record.first]
            for name, value in changes.items():
                if name == "payload":
                    row[-1] = msgspec.Raw(value)
                else:
                    row[RECORD_EVENT_FIELDS.index(name)] = value
            for other in rows:
                if not isinstance(other[-1], msgspec.Raw):
                    other[-1] = msgspec.Raw(canonical_bytes(other[-1]))
            head = raw[HASHED_AT : len(raw) - len(record.body)]
            body = record_body(rows)
            digest = record_hash(head, body) if rehash else record.hash
            txn.put(key, b"\x02" + digest + record.global_hash + head + body, db=db)
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
