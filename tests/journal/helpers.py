"""Shared helpers for journal tests."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lmdb
import msgspec
import psycopg

from palyra.core.canonical import canonical_bytes
from palyra.core.chain import record_body, record_hash
from palyra.core.event_header import RECORD_EVENT_FIELDS
from palyra.journal import EventDraft, JournalConfig
from palyra.journal._env import EVENTS, journal_dir
from palyra.journal.format.record import HASHED_AT, decode_record, is_format2, u64_key
from palyra.journal.postgres.pointer import read_pointer
from palyra.testing.postgres import PostgresServer

BACKENDS = ("lmdb", "postgres")


def config_for(
    backend: str, server: PostgresServer | None = None, **settings: Any
) -> JournalConfig:
    """A journal config on ``backend``: for ``postgres``, a fresh database on ``server``."""
    if backend == "postgres":
        assert server is not None
        return JournalConfig(backend="postgres", dsn=server.create_database(), **settings)
    return JournalConfig(**settings)


def wait_for_dead_clients(config: JournalConfig, timeout: float = 30.0) -> None:
    """Wait until no other session of ``config``'s PostgreSQL database is left.

    A SIGKILLed writer's server session lives on for a moment: whatever the writer had
    sent (a pipelined ``BEGIN`` … ``COMMIT``, or the lock-free commit's one statement)
    waits in the server's socket buffer and is run, and may commit, before the session
    reads the end of the stream. Such a commit was never acknowledged and is no loss,
    but a reader that looks before it lands sees the head move between two of its reads.
    (LMDB: nothing to wait for, the writer's process is the only one that writes.)
    """
    if config.backend != "postgres":
        return
    deadline = time.monotonic() + timeout
    with psycopg.connect(config.dsn, autocommit=True) as conn:
        while True:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                               "current_database() AND pid <> pg_backend_pid() "
                               "AND backend_type = 'client backend'").fetchone()
            if row is not None and row[0] == 0:
                return
            assert time.monotonic() < deadline, f"{row} sessions outlived their clients"
            time.sleep(0.02)


def draft(i: int = 0, **kw: Any) -> EventDraft:
    """A small draft whose payload names ``i``."""
    fields: dict[str, Any] = {"kind": "test.event", "actor": "tester", "payload": {"i": i}}
    fields.update(kw)
    return EventDraft(**fields)


class _RawEvents:
    """The ``_events`` sub-DB of a closed journal, on LMDB or PostgreSQL, for tampering."""

    def __init__(self, data_dir: Path) -> None:
        self._dsn = read_pointer(journal_dir(data_dir))
        self._conn: Any = None
        self._env: Any = None
        if self._dsn is not None:
            self._conn = psycopg.connect(self._dsn)
        else:
            self._env = lmdb.open(str(journal_dir(data_dir)), max_dbs=32)
            self._db = self._env.open_db(EVENTS.encode())
            self._txn = self._env.begin(write=True)

    def at_or_after(self, key: bytes) -> tuple[bytes, bytes] | None:
        if self._conn is not None:
            row = self._conn.execute(
                "SELECT key, value FROM journal_kv WHERE db = %s AND key >= %s ORDER BY key "
                "LIMIT 1", (EVENTS, key)).fetchone()
            return None if row is None else (bytes(row[0]), bytes(row[1]))
        cursor = self._txn.cursor(db=self._db)
        return (bytes(cursor.key()), bytes(cursor.value())) if cursor.set_range(key) else None

    def get(self, key: bytes) -> bytes | None:
        found = self.at_or_after(key)
        return found[1] if found is not None and found[0] == key else None

    def put(self, key: bytes, value: bytes) -> None:
        if self._conn is not None:
            self._conn.execute(
                "INSERT INTO journal_kv (db, key, value) VALUES (%s, %s, %s) "
                "ON CONFLICT (db, key) DO UPDATE SET value = EXCLUDED.value", (EVENTS, key, value))
        else:
            self._txn.put(key, value, db=self._db)

    def delete(self, key: bytes) -> None:
        if self._conn is not None:
            self._conn.execute("DELETE FROM journal_kv WHERE db = %s AND key = %s", (EVENTS, key))
        else:
            self._txn.delete(key, db=self._db)

    def __enter__(self) -> _RawEvents:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._conn is not None:
            with self._conn:  # commits
                pass
        else:
            self._txn.commit()
            self._env.close()


def rewrite_record(data_dir: Path, position: int, *, rehash: bool = False, **changes: Any) -> None:
    """Tamper with the event at ``position`` inside its stored record (the store must be closed).

    ``changes`` name event fields (``payload`` as canonical bytes). The record
    keeps its stored hashes unless ``rehash``, which recomputes its own hash
    (as an attacker would) but leaves the global link alone.
    """
    with _RawEvents(data_dir) as raw_events:
        found = raw_events.at_or_after(u64_key(position))
        assert found is not None
        key, raw = found
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
        raw_events.put(key, b"\x02" + digest + record.global_hash + head + body)


def raw_record(data_dir: Path, position: int, value: bytes | None = None) -> bytes:
    """Read (and optionally overwrite, None deletes nothing) a record's raw bytes."""
    with _RawEvents(data_dir) as raw_events:
        old = raw_events.get(u64_key(position))
        assert old is not None
        if value is not None:
            raw_events.put(u64_key(position), value)
        return old


def put_record(data_dir: Path, position: int, value: bytes) -> None:
    """Store ``value`` as the record under last position ``position`` (the store must be closed)."""
    with _RawEvents(data_dir) as raw_events:
        raw_events.put(u64_key(position), value)


def delete_records(data_dir: Path, positions: list[int]) -> None:
    """Remove records from the log (the store must be closed)."""
    with _RawEvents(data_dir) as raw_events:
        for position in positions:
            raw_events.delete(u64_key(position))
