"""A change to a session outside a run, with several daemons on one PostgreSQL journal.

Only the session's owner writes it: a daemon that does not hold the session's lease
claims it for the change (reading what other daemons wrote first) or, while another
live daemon owns the session, hands the change to that owner and answers once the
owner committed it, so it never overwrites the owner's writes (before, it wrote
unfenced: last writer won; then it was refused ``UNAVAILABLE``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from engine_harness import USER, Harness
from lease_daemons import busy_on, expire, holder, owner_of, started, until
from palyra_gen.palyra import v1 as pb

from palyra.core.errors import ErrorCode, PalyraError
from palyra.core.ids import new_ulid
from palyra.journal import JournalStore
from palyra.journal.postgres.store import PostgresJournalStore


def _postures(store: JournalStore | None, session_id: str) -> list[dict[str, object]]:
    assert store is not None
    return [dict(e.payload) for e in store.read_session(session_id, 0, 1000)
            if e.kind == "session.tool_posture"]


def _posture(session_id: str, tool: str, posture: pb.ToolPosture) -> pb.SetToolPostureRequest:
    return pb.SetToolPostureRequest(session_id=session_id, tool_name=tool, posture=posture)


async def test_a_change_on_a_daemon_not_owning_the_session_is_handed_to_the_owner(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    _b, app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    busy = await busy_on(app_a)  # A owns the session while its run is live
    sid = busy.session_id
    row = holder(a, sid)
    assert row is not None and row[0] == owner_of(a) and row[2]
    await app_a.set_tool_posture(USER, _posture(sid, "add", pb.ToolPosture.ALWAYS_ALLOW))
    # B does not own it: A applies B's change under its lease, after its own.
    changed = await app_b.set_tool_posture(USER, _posture(sid, "shell",
                                                          pb.ToolPosture.DISABLED))
    assert changed.session.tool_postures == {"add": pb.ToolPosture.ALWAYS_ALLOW,
                                             "shell": pb.ToolPosture.DISABLED}
    assert _postures(a.store, sid) == [{"tool_name": "add", "posture": "always_allow"},
                                       {"tool_name": "shell", "posture": "disabled"}]
    assert holder(a, sid) == row  # the session never moved
    assert a.store is not None
    assert not a.store.scan_entities("meta", "session_", "", 10)  # row and answer consumed
    # A refusal is decided by the owner and answered as the asker's own error.
    with pytest.raises(PalyraError) as refused:
        await app_b.branch_session(USER, pb.BranchSessionRequest(session_id=sid))
    assert refused.value.code is ErrorCode.STATE_CONFLICT
    archived = await app_b.cleanup_session(USER, pb.CleanupSessionRequest(session_id=sid))
    assert (archived.cleaned, archived.newly_archived, archived.previous_session_key) == (
        True, True, "busy")
    assert [e.kind for e in a.store.read_session(sid, 0, 1000)
            if e.kind == "session.archived"] == ["session.archived"]
    assert holder(a, sid) == row


async def test_a_branch_handed_to_the_owner_answers_with_the_committed_records(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    _b, app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    busy = await busy_on(app_a)
    sid = busy.session_id
    await app_a.complete_run(USER, pb.CompleteRunRequest(run_id=busy.run_id, wait=True))
    # The session's latest run has ended, and A holds the session as a live run would.
    assert a.engine is not None and a.engine.leases is not None
    assert await a.engine.leases.claim(sid) is not None
    try:
        branched = await app_b.branch_session(USER, pb.BranchSessionRequest(
            session_id=sid, session_label="side"))
    finally:
        await a.engine.leases.unhold(sid)
    assert branched.session.parent_session_id == sid and branched.session.label == "side"
    assert branched.source.branch_state == "branch_source"
    assert a.store is not None
    assert [e.payload["parent_session_id"] for e in a.store.read_session(
        branched.session.session_id, 0, 100) if e.kind == "session.branched"] == [sid]


async def test_a_change_handed_to_an_owner_that_died_lands_once_its_term_ran_out(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    session = (await app_a.resolve_session(USER, pb.ResolveSessionRequest(
        session_key="busy"))).session
    sid = session.session_id
    # A daemon SIGKILLed while it held the session: its lease row stays until its term ends.
    assert isinstance(a.store, PostgresJournalStore)
    assert a.store.acquire_lease("session:" + sid, "gone/1/x", 60) is not None
    change = asyncio.create_task(app_a.set_tool_posture(
        USER, _posture(sid, "add", pb.ToolPosture.DISABLED)))
    await until(lambda: a.store is not None and a.store.scan_entities(
        "meta", "session_change:", "", 10) != [])
    await asyncio.sleep(0.6)  # two rounds of A's own inbox reader: the owner still lives
    assert not change.done() and _postures(a.store, sid) == []
    expire(dsn, sid)  # the dead owner's term runs out
    # A's inbox reader claims the free session and applies the change A is waiting for.
    changed = await asyncio.wait_for(change, 5)
    assert changed.session.tool_postures == {"add": pb.ToolPosture.DISABLED}
    assert _postures(a.store, sid) == [{"tool_name": "add", "posture": "disabled"}]
    assert not a.store.scan_entities("meta", "session_", "", 10)


async def test_a_reset_without_a_run_is_made_by_the_sessions_owner(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    _b, app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    busy = await busy_on(app_a)  # A owns the session while its run is live
    sid = busy.session_id
    row = holder(a, sid)
    reset = await app_b.resolve_session(USER, pb.ResolveSessionRequest(
        session_key="busy", reset_session=True))
    assert reset.reset_applied and not reset.created and reset.session.session_id == sid
    assert holder(a, sid) == row  # A made it, under its term: the session never moved
    assert a.store is not None
    resets = [e for e in a.store.read_session(sid, 0, 1000) if e.kind == "session.reset"]
    assert len(resets) == 1


async def test_a_reset_waits_for_the_owner_and_lands_once_a_dead_owners_term_ran_out(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    sid = (await app_a.resolve_session(USER, pb.ResolveSessionRequest(
        session_key="busy"))).session.session_id
    assert isinstance(a.store, PostgresJournalStore)
    assert a.store.acquire_lease("session:" + sid, "gone/1/x", 60) is not None
    reset = asyncio.create_task(app_a.resolve_session(USER, pb.ResolveSessionRequest(
        session_key="busy", reset_session=True)))
    await asyncio.sleep(0.6)  # two rounds of A's own inbox reader: the owner still lives
    # Before, the reset was written at once, unfenced, while another daemon owned the session.
    assert not reset.done()
    assert [e for e in a.store.read_session(sid, 0, 1000) if e.kind == "session.reset"] == []
    expire(dsn, sid)
    assert (await asyncio.wait_for(reset, 5)).reset_applied
    assert [e.kind for e in a.store.read_session(sid, 0, 1000)].count("session.reset") == 1


async def test_a_retried_branch_finds_the_branch_its_first_request_made(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    _b, app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    sid = (await app_a.resolve_session(USER, pb.ResolveSessionRequest(
        session_key="source"))).session.session_id
    # The session's owner was SIGKILLed: its lease row stays until its term ends, so a
    # branch asked meanwhile is handed over and waits.
    assert isinstance(a.store, PostgresJournalStore)
    assert a.store.acquire_lease("session:" + sid, "gone/1/x", 60) is not None
    request = pb.BranchSessionRequest(session_id=sid, session_label="side",
                                      branch_session_id=new_ulid())
    with pytest.raises(TimeoutError):  # the client gives up, and retries on another daemon
        await asyncio.wait_for(app_a.branch_session(USER, request), 0.5)
    retry = asyncio.create_task(app_b.branch_session(USER, request))
    await until(lambda: a.store is not None and len(a.store.scan_entities(
        "meta", "session_change:", "", 10)) == 2)
    expire(dsn, sid)  # the dead owner's term runs out: a live daemon applies both rows
    branched = await asyncio.wait_for(retry, 10)
    assert branched.session.session_id == request.branch_session_id
    assert branched.session.parent_session_id == sid and branched.session.label == "side"
    assert branched.source.session_id == sid and branched.source.branch_state == "branch_source"

    def branches() -> list[object]:
        assert a.store is not None
        return [e.session_id for e in a.store.read_range(0, 10_000)
                if e.kind == "session.branched"]

    assert branches() == [request.branch_session_id]
    # Once answered, the same request again is answered as made, wherever it is asked.
    for app in (app_a, app_b):
        again = await app.branch_session(USER, request)
        assert again.session == branched.session
    assert branches() == [request.branch_session_id]
    # An id of a session that is not this branch is refused, not answered with it.
    with pytest.raises(PalyraError) as taken:
        await app_b.branch_session(USER, pb.BranchSessionRequest(session_id=sid,
                                                                 branch_session_id=sid))
    assert taken.value.code is ErrorCode.ALREADY_EXISTS
    with pytest.raises(PalyraError) as malformed:  # refused before anything is handed over
        await app_b.branch_session(USER, pb.BranchSessionRequest(
            session_id=sid, branch_session_id="\u0084"))
    assert malformed.value.code is ErrorCode.INVALID_ARGUMENT
    assert branches() == [request.branch_session_id]
