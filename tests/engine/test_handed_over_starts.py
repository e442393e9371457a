"""A run id a client is answered with names a committed run, on every daemon.

Two engines on one real PostgreSQL journal stand for two daemons. A start for a
session owned by another daemon is handed over as a ``session_inbox:`` row; these
tests stop the daemons at the instants the three-daemon kill test caught: the asker
gone right after its hand-over, the owner held between taking the row and
committing the run, a client's retry arriving in between.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from engine_harness import USER, Harness, loop_text
from lease_daemons import busy_on, expire, pg_daemon, started, until
from palyra_gen.palyra import v1 as pb

from palyra.app._convert import identity_of
from palyra.core.errors import ErrorCode, PalyraError
from palyra.core.ids import new_ulid
from palyra.engine.run.inbox import RelayedStart, start_draft
from palyra.journal.postgres.store import PostgresJournalStore


def _committed(dsn: str, run_id: str) -> bool:
    """Whether the run's row is in the database (asked directly, no daemon's cache)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT 1 FROM journal_kv WHERE db = 'runs' AND key = %s",
                           (run_id.encode(),)).fetchone()
    return row is not None


def _commit_waits_on_a_lock(dsn: str) -> bool:
    """Whether some session of the database waits for a row lock (a held commit)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                           "current_database() AND wait_event_type = 'Lock'").fetchone()
    return row is not None and row[0] > 0


async def _answer(call: Awaitable[Any], dsn: str, run_id: str) -> tuple[str, bool]:
    """How ``call`` was answered, and whether the run was committed at that instant."""
    try:
        await call
        code = "OK"
    except PalyraError as exc:
        code = str(exc.code)
    return code, _committed(dsn, run_id)


def _start(run_id: str, session_id: str) -> RelayedStart:
    return RelayedStart(run_id, session_id, identity_of(USER), loop_text(1), complete=True)


def _create(run_id: str) -> pb.CreateRunRequest:
    return pb.CreateRunRequest(run_id=run_id, session_key="busy",
                               input=pb.MessageInput(text=loop_text(1)), complete=True)


async def test_a_retry_reaching_the_owner_mid_accept_is_answered_once_the_run_is_committed(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a = pg_daemon(daemons, tmp_path, dsn, ttl_s=60)  # owns the session
    app_a = await a.start()
    b = pg_daemon(daemons, tmp_path, dsn, ttl_s=60)  # the daemon the client reached first
    await b.start()
    busy = await busy_on(app_a)
    run_id = new_ulid()
    with psycopg.connect(dsn) as lock:
        # A's accept commit reads its lease row FOR SHARE: held here, the commit waits.
        lock.execute("SELECT 1 FROM journal_lease WHERE name = %s FOR UPDATE",
                     ("session:" + busy.session_id,))
        # B's hand-over commit, then B dies (its client is cut off and retries).
        assert b.store is not None
        await b.store.append([start_draft(_start(run_id, busy.session_id))])
        # A's inbox reader takes the row and commits the run's accept: held.
        await until(lambda: _commit_waits_on_a_lock(dsn))
        # The client's retry reaches A while that accept is in flight.
        retry = asyncio.create_task(_answer(app_a.create_run(USER, _create(run_id)), dsn,
                                            run_id))
        await asyncio.sleep(0.5)
        lock.rollback()
    code, committed = await asyncio.wait_for(retry, 10)
    # ALREADY_EXISTS only for a run every daemon reads: before, it came at once, with
    # nothing committed (and a GET on any daemon answered NOT_FOUND).
    assert (code, committed) == ("ALREADY_EXISTS", True)
    a.check_tape(run_id)


async def test_the_askers_own_inbox_starts_its_hand_over_once_the_owners_term_ran_out(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    session = (await app_a.resolve_session(USER, pb.ResolveSessionRequest(
        session_key="busy"))).session
    # A daemon SIGKILLed while it held the session: its lease row stays until its term ends.
    assert isinstance(a.store, PostgresJournalStore)
    assert a.store.acquire_lease("session:" + session.session_id, "gone/1/x", 60) is not None
    run_id = new_ulid()
    create = asyncio.create_task(app_a.create_run(USER, _create(run_id)))
    # A hands the start over (the session is owned elsewhere) and waits for the owner.
    await until(lambda: a.store is not None and a.store.scan_entities(
        "meta", "session_inbox:", "", 10) != [])
    await asyncio.sleep(0.6)  # two rounds of A's own inbox reader
    expire(dsn, session.session_id)  # the dead owner's term runs out
    # A's inbox reader now claims the free session and starts the run A is waiting for
    # (before, it had dropped the row as "already exists": A was still accepting the id,
    # and answered UNAVAILABLE after 2 x TTL + 5 s with the run started nowhere).
    created = await asyncio.wait_for(create, 5)
    assert created.run.run_id == run_id
    assert _committed(dsn, run_id)
    assert a.store is not None
    kinds = [e.kind for e in a.store.read_range(0, 10_000)]
    assert "session.run_dropped" not in kinds
    a.check_tape(run_id)


async def test_one_run_id_started_on_two_daemons_at_once_is_accepted_once(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    b, app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    run_id = new_ulid()
    # Two sessions, so each daemon claims its own and neither hands over: both look for
    # the id before either commits (a retry racing its first try across daemons).
    answers = await asyncio.gather(*(
        app.create_run(USER, pb.CreateRunRequest(
            run_id=run_id, session_key=key, input=pb.MessageInput(text=loop_text(1)),
            complete=True))
        for app, key in ((app_a, "left"), (app_b, "right"))), return_exceptions=True)
    refused = [x for x in answers if isinstance(x, PalyraError)]
    assert len(refused) == 1 and refused[0].code is ErrorCode.ALREADY_EXISTS, answers
    winner = a if isinstance(answers[0], pb.CreateRunResponse) else b
    assert winner.app is not None
    await until(lambda: winner.kinds(run_id)[-1:] == ["status:DONE"])
    # One tape, not two accepts interleaved on it.
    assert winner.kinds(run_id).count("status:ACCEPTED") == 1
    winner.check_tape(run_id)


@pytest.mark.parametrize("looked_before", [True, False])
async def test_a_run_committed_on_one_daemon_is_found_on_the_other_at_once(
    daemons: list[Harness], tmp_path: Path, dsn: str, looked_before: bool
) -> None:
    _a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    b, app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    assert isinstance(b.store, PostgresJournalStore) and b.store._watch is not None
    run_id = new_ulid()
    if looked_before:  # B looked the id up before it existed (its inbox reader does)
        with pytest.raises(PalyraError) as missing:
            await app_b.get_run(USER, pb.GetRunRequest(run_id=run_id))
        assert missing.value.code is ErrorCode.NOT_FOUND
    # B's watcher falls behind (a lost notification, a starved thread): stopped here.
    b.store._watch.stop()
    await app_a.create_run(USER, _create(run_id))
    # The client, answered by A, asks B next: B finds it (before, B served its cached
    # "not found" until its watcher caught up).
    found = await app_b.get_run(USER, pb.GetRunRequest(run_id=run_id))
    assert found.run.run_id == run_id
