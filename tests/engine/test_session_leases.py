"""Two engines on one PostgreSQL journal: each session is owned by one daemon through its
lease row; a daemon resumes only the runs of sessions it owns, takes over those of a daemon
whose lease ran out, and a fenced-out owner writes nothing even before it notices."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from engine_harness import ADMIN, USER, Harness, loop_text, next_approval
from lease_daemons import busy_on, expire, holder, owner_of, pg_daemon, started, until
from palyra_gen.palyra import v1 as pb

from palyra.app import PalyraApp
from palyra.core.errors import ErrorCode, PalyraError
from palyra.engine.model.lifecycle import is_run_terminal
from palyra.engine.model.records import RUNS, RunRecord, decode
from palyra.engine.run import inbox
from palyra.journal import verify_store

APPROVE = pb.ApprovalDecision.APPROVE


async def _hitl_run(app: PalyraApp, k: int) -> pb.Run:
    """A run asking approval for each step; the posture change before it holds the
    session's lease for a term of its own, so the run's claim is the second term."""
    resolved = await app.resolve_session(USER, pb.ResolveSessionRequest(session_key="hitl"))
    await app.set_tool_posture(USER, pb.SetToolPostureRequest(
        session_id=resolved.session.session_id, tool_name="add",
        posture=pb.ToolPosture.ASK_EACH_TIME))
    created = await app.create_run(USER, pb.CreateRunRequest(
        session_key="hitl", input=pb.MessageInput(text=loop_text(k)), complete=True))
    return created.run


async def _decide(app: PalyraApp, approval_id: str, reason: str) -> pb.Approval:
    response = await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=approval_id, decision=APPROVE, scope=pb.ApprovalScope.ONCE,
        reason=reason))
    return response.approval


async def _approve_to_end(app: PalyraApp, run_id: str, reason: str) -> pb.Run:
    """Approve every step the run asks for until it ends."""
    async with asyncio.timeout(10):
        while True:
            run = (await app.get_run(USER, pb.GetRunRequest(run_id=run_id))).run
            if run.state in (pb.RunState.DONE, pb.RunState.FAILED, pb.RunState.CANCELLED):
                return run
            if run.state == pb.RunState.WAITING_FOR_APPROVAL and run.pending_approval_id:
                await _decide(app, run.pending_approval_id, reason)
            else:
                await asyncio.sleep(0.005)


async def test_a_daemon_resumes_only_the_sessions_it_owns(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    run = await _hitl_run(app_a, 2)
    await next_approval(app_a, run.run_id)
    assert holder(a, run.session_id) == (owner_of(a), 2, True)
    b = pg_daemon(daemons, tmp_path, dsn, ttl_s=60)
    await b.start()  # its recovery sees the unfinished run, but A owns the session
    assert b.engine is not None and b.engine.live_runs() == []
    assert holder(a, run.session_id) == (owner_of(a), 2, True)
    done = await _approve_to_end(app_a, run.run_id, "a")
    assert done.state == pb.RunState.DONE and "result=2" in done.final_text
    # The run ended, so A let go of the session, settled: nothing for B to take over.
    await until(lambda: holder(a, run.session_id) == ("", 2, False))
    a.check_tape(run.run_id)


async def test_a_dead_owners_session_is_taken_over_and_the_old_owner_is_fenced_out(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    ttl_s = 1.0
    a = pg_daemon(daemons, tmp_path, dsn, ttl_s=60)  # renews every 20 s: never in this test
    app_a = await a.start()
    run = await _hitl_run(app_a, 3)
    first = await next_approval(app_a, run.run_id)
    b, app_b = await started(daemons, tmp_path, dsn, ttl_s=ttl_s)
    assert b.engine is not None and b.engine.live_runs() == []
    expire(dsn, run.session_id)  # A stalls past its term; it does not know yet
    expired = time.monotonic()
    await until(b.engine.live_runs)
    assert time.monotonic() - expired <= 2 * ttl_s  # taken over within 2 x TTL
    assert holder(b, run.session_id) == (owner_of(b), 3, True)
    # A still has the run live and still believes it owns it: its write is refused.
    assert a.engine is not None and [r.run_id for r, _ in a.engine.live_runs()] == [run.run_id]
    tape_before = len(a.tape(run.run_id))
    with pytest.raises(PalyraError) as refused:
        await _decide(app_a, first.approval_id, "from the fenced-out owner")
    assert refused.value.code in (ErrorCode.LEASE_STALE, ErrorCode.UNAVAILABLE)
    await until(lambda: not a.engine.live_runs())  # A's actor stopped without writing
    assert len(a.tape(run.run_id)) == tape_before
    # B, the owner now, carries the run to its end; A's decision never landed.
    done = await _approve_to_end(app_b, run.run_id, "b")
    assert done.state == pb.RunState.DONE and "result=3" in done.final_text
    approval = (await app_b.get_approval(ADMIN, pb.GetApprovalRequest(
        approval_id=first.approval_id))).approval
    assert approval.state == pb.ApprovalState.APPROVED and approval.reason == "b"
    kinds = b.kinds(run.run_id)
    assert kinds.count("status:DONE") == 1
    b.check_tape(run.run_id)
    assert b.store is not None
    assert verify_store(b.store).ok


async def test_a_stopped_daemon_hands_its_sessions_over_without_waiting_for_the_ttl(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    run = await _hitl_run(app_a, 1)
    await next_approval(app_a, run.run_id)
    b, app_b = await started(daemons, tmp_path, dsn, ttl_s=1.5)
    await a.stop()  # SIGTERM: the run is parked and its session released unsettled
    row = holder(b, run.session_id)
    assert row is not None and row[0] == owner_of(a) and not row[2]
    assert b.engine is not None
    await until(b.engine.live_runs)  # within 5 s: far less than A's 60 s term
    done = await _approve_to_end(app_b, run.run_id, "b")
    assert done.state == pb.RunState.DONE and "result=1" in done.final_text
    b.check_tape(run.run_id)


async def test_an_approval_decided_on_another_daemon_reaches_the_run_on_itsowner_of(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    b, app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    run = await _hitl_run(app_a, 2)
    for _ in range(2):
        approval = await next_approval(app_b, run.run_id)  # any daemon serves reads
        decided = await _decide(app_b, approval.approval_id, "decided on b")
        assert decided.state == pb.ApprovalState.APPROVED and decided.reason == "decided on b"
    assert b.engine is not None and b.engine.live_runs() == []  # the run never moved
    done = (await app_a.complete_run(USER, pb.CompleteRunRequest(run_id=run.run_id,
                                                                 wait=True))).run
    assert done.state == pb.RunState.DONE and "result=2" in done.final_text
    assert a.store is not None
    assert a.store.scan_entities("meta", "approval_relay:", "", 10) == []  # consumed
    a.check_tape(run.run_id)


async def _state(app: PalyraApp, run_id: str) -> pb.Run:
    return (await app.get_run(USER, pb.GetRunRequest(run_id=run_id))).run


async def test_messages_for_a_run_on_another_daemon_are_handed_over_not_refused(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    b, app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    assert a.engine is not None and b.engine is not None
    first = (await app_a.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text=loop_text(1)), wait=True))).run  # idle, waiting for input
    await app_b.send_run_input(USER, pb.SendRunInputRequest(
        run_id=first.run_id, input=pb.MessageInput(text=loop_text(2))))
    await asyncio.sleep(1.0)  # several inbox rounds: a row applied twice would show
    await app_b.complete_run(USER, pb.CompleteRunRequest(run_id=first.run_id))
    async with asyncio.timeout(10):
        while True:
            done = await _state(app_b, first.run_id)
            if done.state == pb.RunState.DONE:
                break
            await asyncio.sleep(0.02)
    assert "result=2" in done.final_text
    assert a.kinds(first.run_id).count("user_input") == 2  # the handed-over input, once
    assert b.engine.live_runs() == []  # it ran on A, its owner, all along
    assert a.kinds(first.run_id).count("status:DONE") == 1
    a.check_tape(first.run_id)
    # A cancel asked of B reaches the run on A too.
    second = (await app_a.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text=loop_text(1)), wait=True))).run
    aborted = await app_b.abort_run(USER, pb.AbortRunRequest(run_id=second.run_id))
    assert aborted.cancel_requested and aborted.state == pb.RunState.CANCELLED
    assert a.store is not None
    assert a.store.scan_entities("meta", "run_inbox:", "", 10) == []  # every message taken


async def test_a_new_run_in_a_session_owned_elsewhere_is_handed_over_not_refused(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    b, app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    assert a.engine is not None and b.engine is not None
    first = (await app_a.create_run(USER, pb.CreateRunRequest(
        session_key="busy", input=pb.MessageInput(text=loop_text(1)), wait=True))).run
    assert holder(a, first.session_id) == (owner_of(a), 1, True)  # A owns it: its run is live
    second = (await app_b.create_run(USER, pb.CreateRunRequest(
        session_key="busy", input=pb.MessageInput(text=loop_text(2)), complete=True))).run
    assert second.session_id == first.session_id
    async with asyncio.timeout(10):
        while True:
            done = await _state(app_b, second.run_id)
            if done.state == pb.RunState.DONE:
                break
            await asyncio.sleep(0.02)
    assert "result=2" in done.final_text
    assert b.engine.live_runs() == []  # started and run on A, the session's owner
    assert a.store is not None
    assert a.store.scan_entities("meta", "session_inbox:", "", 10) == []
    a.check_tape(second.run_id)


async def test_a_new_run_that_claims_an_expired_lease_resumes_the_runs_its_old_owner_left(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    # B's sweep runs every 20 s, never in this test: only the new run's claim can find
    # the run A left behind.
    _a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    left = await _hitl_run(app_a, 2)
    await next_approval(app_a, left.run_id)
    b, app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    assert b.engine is not None and b.engine.live_runs() == []
    expire(dsn, left.session_id)  # A stalls past its term
    new = (await app_b.create_run(USER, pb.CreateRunRequest(
        session_key="hitl", input=pb.MessageInput(text=loop_text(1)), complete=True))).run
    assert new.session_id == left.session_id
    assert holder(b, left.session_id) == (owner_of(b), 3, True)
    # The claim took A's unsettled term over: the run A left is B's now, resumed once.
    assert left.run_id in {r.run_id for r, _ in b.engine.live_runs()}
    for run_id, k in ((new.run_id, 1), (left.run_id, 2)):
        done = await _approve_to_end(app_b, run_id, "b")
        assert done.state == pb.RunState.DONE and f"result={k}" in done.final_text
        b.check_tape(run_id)
    assert b.kinds(left.run_id).count("status:DONE") == 1
    assert b.store is not None
    recovered = [e for e in b.store.read_range(0, 10_000) if e.kind == "run.recovered"]
    assert [e.run_id for e in recovered] == [left.run_id]
    # Both ended on B: the session is settled, nothing is left for a sweep.
    await until(lambda: holder(b, left.session_id) == ("", 3, False))


async def _stream_requests(*requests: pb.RunStreamRequest) -> AsyncIterator[pb.RunStreamRequest]:
    for request in requests:
        await asyncio.sleep(0.2)  # the later inputs reach a run already started
        yield request


async def test_a_stream_run_in_a_session_owned_elsewhere_is_handed_over_and_streamed_here(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    b, app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    assert a.engine is not None and b.engine is not None
    busy = await busy_on(app_a)
    stream = app_b.run_stream(USER, _stream_requests(
        pb.RunStreamRequest(v=1, session_key="busy", input=pb.MessageInput(text=loop_text(2))),
        pb.RunStreamRequest(v=1, input=pb.MessageInput(text="and then this"))))
    async with asyncio.timeout(20):
        events = [response.event async for response in stream]
    run_id = events[0].run_id
    assert events[0].session_id == busy.session_id
    # Streamed on B, dense from 0, to the end: the run itself lived on A, the owner.
    assert [e.tape_seq for e in events] == list(range(len(events)))
    assert events[-1].status is not None and events[-1].status.state == pb.RunState.DONE
    assert b.engine.live_runs() == [] and a.kinds(run_id).count("user_input") == 2
    replies = [e.message_replied.reply_text for e in events if e.message_replied]
    assert "result=2" in replies[0] and replies[-1] == "and then this"
    assert a.store is not None
    assert a.store.scan_entities("meta", "session_inbox:", "", 10) == []
    assert a.store.scan_entities("meta", "run_inbox:", "", 10) == []
    a.check_tape(run_id)


async def test_a_start_that_resets_a_session_owned_elsewhere_is_handed_over(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    b, app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    assert a.engine is not None and b.engine is not None
    busy = await busy_on(app_a)
    stream = app_b.run_stream(USER, _stream_requests(pb.RunStreamRequest(
        v=1, session_key="busy", reset_session=True, input=pb.MessageInput(text=loop_text(2)))))
    async with asyncio.timeout(20):
        events = [response.event async for response in stream]
    run_id = events[0].run_id
    assert events[0].session_id == busy.session_id
    assert events[-1].status is not None and events[-1].status.state == pb.RunState.DONE
    assert b.engine.live_runs() == []
    assert a.store is not None
    resets = [e for e in a.store.read_session(busy.session_id, 0, 1000)
              if e.kind == "session.reset"]
    assert len(resets) == 1  # planned and committed once, by A under its lease
    # The reset forgot the session's previous run: the new run names none.
    raw = a.store.get_entity(RUNS, run_id)
    assert raw is not None and decode(RunRecord, raw).previous_run_id == ""
    a.check_tape(run_id)


async def test_a_session_change_by_a_fenced_out_owner_is_refused_and_never_written(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    _a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    b, app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    busy = await busy_on(app_a)  # A owns the session while its run is live
    await app_a.set_tool_posture(USER, pb.SetToolPostureRequest(  # the owner's change lands
        session_id=busy.session_id, tool_name="add", posture=pb.ToolPosture.ALWAYS_ALLOW))
    expire(dsn, busy.session_id)  # A stalls past its term
    await app_b.create_run(USER, pb.CreateRunRequest(  # B's claim takes the session over
        session_key="busy", input=pb.MessageInput(text=loop_text(1)), complete=True))
    assert holder(b, busy.session_id) == (owner_of(b), 2, True)
    with pytest.raises(PalyraError) as refused:  # A, unaware, changes the session
        await app_a.set_tool_posture(USER, pb.SetToolPostureRequest(
            session_id=busy.session_id, tool_name="add", posture=pb.ToolPosture.DISABLED))
    assert refused.value.code is ErrorCode.LEASE_STALE
    assert b.store is not None
    postures = [e.payload for e in b.store.read_session(busy.session_id, 0, 1000)
                if e.kind == "session.tool_posture"]
    assert postures == [{"tool_name": "add", "posture": "always_allow"}]  # A's never landed


async def test_a_stream_error_cancels_its_run_on_the_daemon_that_owns_it(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    _b, app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    await busy_on(app_a)
    stream = app_b.run_stream(USER, _stream_requests(
        pb.RunStreamRequest(v=1, session_key="busy", input=pb.MessageInput(text="hello")),
        pb.RunStreamRequest(v=1, run_id="01J00000000000000000000001",
                            input=pb.MessageInput(text="another run")),
    ))
    events: list[pb.TapeEvent] = []
    with pytest.raises(PalyraError) as refused:
        async with asyncio.timeout(20):
            async for response in stream:
                events.append(response.event)
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    last = events[-1].status
    assert last is not None and last.state == pb.RunState.CANCELLED
    assert last.reason == "stream_protocol_error"
    a.check_tape(events[-1].run_id)


async def test_a_new_run_and_the_sweep_claiming_one_orphan_together_resume_its_runs_once(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    _a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    left = await _hitl_run(app_a, 1)
    await next_approval(app_a, left.run_id)
    b, app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    assert b.engine is not None
    expire(dsn, left.session_id)  # A stalls: its session is an orphan now
    # B's sweep and a new run on B claim it at the same moment.
    takeover = b.engine._takeover
    assert takeover is not None
    _, created = await asyncio.gather(
        takeover.round(),
        app_b.create_run(USER, pb.CreateRunRequest(
            session_key="hitl", input=pb.MessageInput(text=loop_text(1)), complete=True)))
    assert created.run is not None
    for run_id in (left.run_id, created.run.run_id):
        done = await _approve_to_end(app_b, run_id, "b")
        assert done.state == pb.RunState.DONE and "result=1" in done.final_text
        b.check_tape(run_id)  # dense, no event twice: one owner wrote it
    assert b.store is not None
    recovered = [e for e in b.store.read_range(0, 10_000) if e.kind == "run.recovered"]
    assert [e.run_id for e in recovered] == [left.run_id]


async def test_an_input_handed_over_is_answered_once_its_owner_queued_it(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    _b, app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    run = (await app_a.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text=loop_text(1)), wait=True))).run  # idle, waiting for input
    await app_b.send_run_input(USER, pb.SendRunInputRequest(
        run_id=run.run_id, input=pb.MessageInput(text=loop_text(2))))
    # Answered only once the owner's commit queued it (before: as soon as it was handed
    # over). Read the record first: an input it holds pending may be taped by then.
    assert a.store is not None
    raw = a.store.get_entity(RUNS, run.run_id)
    assert raw is not None
    pending = len(decode(RunRecord, raw).pending_inputs)
    assert pending + a.kinds(run.run_id).count("user_input") >= 2
    assert a.store.scan_entities("meta", "run_answer:", "", 10) == []  # taken by its sender


async def test_an_input_handed_over_to_a_run_that_ends_first_is_refused_not_dropped(
    daemons: list[Harness], tmp_path: Path, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Neither daemon's own inbox reader runs during the test: the order is the test's.
    monkeypatch.setattr(inbox, "INBOX_POLL_S", 3600.0)
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    b, app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    assert b.store is not None
    run = (await app_a.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text=loop_text(1)), wait=True))).run
    sending = asyncio.ensure_future(app_b.send_run_input(USER, pb.SendRunInputRequest(
        run_id=run.run_id, input=pb.MessageInput(text=loop_text(2)))))
    store_b = b.store
    await until(lambda: store_b.scan_entities("meta", "run_inbox:", "", 10))
    await app_a.abort_run(USER, pb.AbortRunRequest(run_id=run.run_id))  # it ends first
    assert not sending.done()  # the sender still waits for the owner's answer

    async def never(*_args: object) -> bool:
        return False

    def ended_as_b_reads_it() -> bool:
        raw = store_b.get_entity(RUNS, run.run_id)
        return raw is not None and is_run_terminal(decode(RunRecord, raw).state)

    # b follows a's writes a moment later; before that its round rightly leaves the
    # row alone (to b the run is still live elsewhere), and nobody would answer.
    await until(ended_as_b_reads_it)
    # Any daemon drops the row of an ended run: here one that has no live run.
    await inbox.InboxReader(store_b, lambda _run_id: None, never, never).round()
    with pytest.raises(PalyraError) as refused:
        await asyncio.wait_for(sending, 10)
    assert refused.value.code is ErrorCode.RUN_TERMINAL  # as a local caller is refused
    assert store_b.scan_entities("meta", "run_inbox:", "", 10) == []
    assert store_b.scan_entities("meta", "run_answer:", "", 10) == []
    assert a.kinds(run.run_id).count("user_input") == 1
