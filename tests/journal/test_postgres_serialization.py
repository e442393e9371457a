"""The writer runs a transaction the database aborted for retry (SQLSTATE 40001) again.

CockroachDB runs every transaction ``SERIALIZABLE``; PostgreSQL aborts a transaction at
``REPEATABLE READ`` or ``SERIALIZABLE`` whose ``SELECT … FOR UPDATE`` of the head row
finds it changed by a commit after its snapshot: ``could not serialize access due to
concurrent update``. The database here is set to ``SERIALIZABLE`` for every
connection, so two writers (two daemons) appending together collide on the head row
for real; every append must still land once, and the chain verify.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import psycopg

from palyra.journal import JournalConfig, JournalStore, verify_store
from palyra.journal.postgres.writer import PostgresWriter
from palyra.testing.postgres import PostgresServer

from .helpers import draft


def _serializable(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        name = conn.info.dbname
        conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_isolation '
                     "= 'serializable'")


def _retries(store: JournalStore) -> int:
    writer = store._writer  # the count is the writer's own, as the test needs it
    assert isinstance(writer, PostgresWriter)
    return writer.serialization_retries


async def test_a_commit_aborted_for_retry_is_retried_and_acknowledged_once(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = postgres_server.create_database()
    config = JournalConfig(backend="postgres", dsn=dsn)
    JournalStore.open(tmp_path / "init", config=config).close()  # the schema, first
    _serializable(dsn)
    a = JournalStore.open(tmp_path / "a", config=config)
    b = JournalStore.open(tmp_path / "b", config=config)
    try:
        async def appender(store: JournalStore, name: str, count: int) -> list[str]:
            ids = []
            for n in range(count):
                events = await store.append([draft(n, session_id=f"s{n % 2}", run_id="r",
                                                   tape=True, payload={"by": name})])
                ids += [e.event_id for e in events]
            return ids

        written = await asyncio.gather(*(appender(store, f"{name}{k}", 25)
                                         for k in range(3) for name, store in
                                         (("a", a), ("b", b))))
        assert _retries(a) + _retries(b) > 0, "no commit was aborted for retry"
        acknowledged = sorted(i for ids in written for i in ids)
        events = a.read_range(0, 1000)
        assert sorted(e.event_id for e in events) == acknowledged  # each once
        assert [e.position for e in events] == list(range(1, len(acknowledged) + 1))
        assert [e.tape_seq for e in a.read_tape("r", -1, 1000).events] == list(
            range(len(acknowledged)))
        assert verify_store(a).ok
    finally:
        a.close()
        b.close()
