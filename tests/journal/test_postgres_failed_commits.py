"""After a commit that failed on the server, the writer's next commits succeed.

psycopg prepares a statement the ``prepare_threshold``-th time it runs it, inside the
writer's pipeline. When a statement before it fails, the server skips the rest of
the pipeline, the ``PREPARE`` included, yet psycopg may count the statement as
prepared: every later commit on that connection then failed "prepared statement
_pg3_N does not exist". Only the ``40001`` retry used to take a new connection.

The failures here are real ones on the real server: the head row's lock not granted
in time (another session holds it, ``lock_timeout`` set on the database), and the
writer's backend ended by ``pg_terminate_backend``.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from palyra.core.errors import PalyraError
from palyra.journal import JournalConfig, JournalStore, verify_store
from palyra.journal.postgres.writer import PostgresWriter
from palyra.testing.postgres import PostgresServer

from .helpers import draft

# More failures in a row than psycopg's default ``prepare_threshold`` (5), so every
# statement of the pipeline crosses it inside a failed commit.
FAILURES = 8


def _lock_timeout(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{conn.info.dbname}" SET lock_timeout = 200')


def _store(tmp_path: Path, dsn: str) -> JournalStore:
    return JournalStore.open(tmp_path / "d", config=JournalConfig(backend="postgres", dsn=dsn))


async def _append(store: JournalStore, n: int) -> None:
    await store.append([draft(n, session_id="s", run_id="r", tape=True)])


async def test_commits_after_commits_refused_a_lock_succeed(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = postgres_server.create_database()
    _store(tmp_path, dsn).close()  # the schema, first
    _lock_timeout(dsn)
    store = _store(tmp_path, dsn)
    try:
        n = 0
        for _ in range(3):  # steady commits: the writer knows its heads
            await _append(store, n := n + 1)
        with psycopg.connect(dsn) as holder:  # another session holds the head row
            holder.execute("SELECT 1 FROM journal_head FOR UPDATE")
            for _ in range(FAILURES):
                with pytest.raises(PalyraError):
                    await _append(store, n := n + 1)
            holder.rollback()
        for _ in range(FAILURES):
            await _append(store, n := n + 1)
        events = store.read_range(0, 100)
        assert len(events) == 3 + FAILURES
        assert [e.tape_seq for e in store.read_tape("r", -1, 100).events] == list(
            range(3 + FAILURES))
        assert verify_store(store).ok
    finally:
        store.close()


async def test_commits_after_the_writers_backend_was_terminated_succeed(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = postgres_server.create_database()
    store = _store(tmp_path, dsn)
    try:
        for n in range(FAILURES):
            await _append(store, n)
        writer = store._writer  # its backend, the one to end
        assert isinstance(writer, PostgresWriter)
        with psycopg.connect(dsn, autocommit=True) as admin:
            ended = admin.execute("SELECT pg_terminate_backend(%s)",
                                  (writer._conn.info.backend_pid,)).fetchone()
        assert ended == (True,)
        for n in range(FAILURES, 2 * FAILURES):  # the first may fail, none after it
            try:
                await _append(store, n)
            except PalyraError:
                assert n == FAILURES
        assert len(store.read_tape("r", -1, 100).events) >= 2 * FAILURES - 1
        assert verify_store(store).ok
    finally:
        store.close()
