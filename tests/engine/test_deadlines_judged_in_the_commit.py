"""A handed-over request read before its deadline and committed after it never lands.

Two engines on one real PostgreSQL server. B hands a request to A, the owner, with a
deadline on the database's clock, and never withdraws it: its give-up could not be
committed (the database was away for it), so only the deadline stands between the
request and a late apply. A reads the row in time, passes its own check of the
deadline, and commits: the commit waits for the journal's head row, held here by a
third connection (a slow database) until the deadline has passed. The owner's commit
stands on the deadline judged by the database inside that commit's transaction, so it
writes nothing, and A drops the row on its next look. Before, it stood on the row's
value alone: A applied the request its asker had stopped waiting for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from engine_harness import Harness
from lease_daemons import busy_on, started, until

from palyra.core.ids import new_ulid
from palyra.engine.model.records import RUNS, RunRecord, decode
from palyra.engine.run.inbox import RelayedMessage, message_draft
from palyra.engine.sessions.handover import SessionChange, change_draft
from palyra.journal import JournalStore

DEADLINE_MS = 2500
"""How far ahead of the database's clock B sets the deadline: time enough for A's inbox
reader (every 250 ms) to read the row before it."""


def _db_ms(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint").fetchone()
        assert row is not None
        return int(row[0])


def _lock_waiters(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                           "current_database() AND wait_event_type = 'Lock'").fetchone()
        assert row is not None
        return int(row[0])


@contextmanager
def _head_held(dsn: str) -> Iterator[None]:
    """Every commit waits while this holds the journal's head row."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT 1 FROM journal_head FOR UPDATE")
        try:
            yield
        finally:
            conn.rollback()


async def _late_commit(dsn: str, deadline_ms: int) -> None:
    """Hold the head row until the database's clock is past ``deadline_ms``, with A's
    commit of the request waiting for it (A read the row before the deadline)."""
    with _head_held(dsn):
        await until(lambda: _lock_waiters(dsn) > 0, seconds=DEADLINE_MS / 1000)
        now_ms = _db_ms(dsn)
        assert now_ms < deadline_ms  # A is committing, and read the row in time
        await asyncio.sleep((deadline_ms - now_ms + 200) / 1000)  # a wait, not a measure
        assert _db_ms(dsn) > deadline_ms


def _kinds(store: JournalStore | None, session_id: str, prefix: str) -> list[str]:
    assert store is not None
    return [e.kind for e in store.read_session(session_id, 0, 1000)
            if e.kind.startswith(prefix)]


async def test_a_change_read_in_time_and_committed_late_never_lands(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    b, _app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    sid = (await busy_on(app_a)).session_id  # A owns the session while its run is live
    assert a.engine is not None and a.store is not None and b.store is not None
    record = a.engine.session_reader.get(sid)
    assert record is not None
    deadline = _db_ms(dsn) + DEADLINE_MS
    change = SessionChange(new_ulid(), sid, record.identity, "posture", tool_name="shell",
                           posture="disabled", deadline_ms=deadline)
    await b.store.append([change_draft(change)])
    await _late_commit(dsn, deadline)
    await until(lambda: not a.store.scan_entities("meta", "session_change:", "", 10))
    assert _kinds(a.store, sid, "session.tool_posture") == []  # never applied
    assert _kinds(a.store, sid, "session.change") == ["session.change_relayed",
                                                      "session.change_dropped"]
    assert not a.store.scan_entities("meta", "session_answer:", "", 10)


async def test_an_input_read_in_time_and_committed_late_is_never_queued(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    b, _app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    run = await busy_on(app_a)  # A runs it, waiting for input
    assert a.store is not None and b.store is not None
    raw = a.store.get_entity(RUNS, run.run_id)
    assert raw is not None
    record = decode(RunRecord, raw)
    deadline = _db_ms(dsn) + DEADLINE_MS
    message = RelayedMessage(new_ulid(), text="too late", deadline_ms=deadline)
    await b.store.append([message_draft(record, message, "user")])
    await _late_commit(dsn, deadline)
    await until(lambda: not a.store.scan_entities("meta", "run_inbox:", "", 10))
    kinds = [e.kind for e in a.store.read_range(0, 1000)
             if e.run_id == run.run_id and e.kind.startswith("run.input")]
    assert kinds == ["run.input_relayed", "run.input_dropped"]  # never queued
    assert not a.store.scan_entities("meta", "run_answer:", "", 10)
