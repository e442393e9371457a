"""A decision or an input for a run whose session nobody owns any more, on two engines.

The daemon that receives it takes the session over itself (the takeover recovery and
the sweep use: the old owner is fenced out, the run resumes here) and applies it,
instead of handing it to an owner that is gone and answering ``UNAVAILABLE`` after
2 x TTL + 5 s unless some daemon's sweep took the session meanwhile. The owner stops
(SIGTERM: its run parked, its session released unsettled) and the other daemon runs a
60 s TTL, so its first sweep comes 20 s after its start: before that only the request
can take the session.

And an input handed to a live but slow owner lands only while its sender waits: its
sender's give-up and the owner's queueing are each a compare-and-set on its row.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from engine_harness import ADMIN, USER, Harness, loop_text, next_approval
from lease_daemons import holder, owner_of, started, until
from palyra_gen.palyra import v1 as pb

from palyra.app import PalyraApp
from palyra.core.errors import ErrorCode, PalyraError
from palyra.engine.model.records import RUNS, RunRecord, decode
from palyra.engine.run import inbox
from palyra.journal import JournalStore

# Without the takeover the request waits for B's first sweep (20 s after B started), or
# 2 x 60 + 5 s: longer than this.
ANSWERED_S = 15


async def _hitl_run(app: PalyraApp, k: int) -> pb.Run:
    """A run asking approval for each step."""
    resolved = await app.resolve_session(USER, pb.ResolveSessionRequest(session_key="hitl"))
    await app.set_tool_posture(USER, pb.SetToolPostureRequest(
        session_id=resolved.session.session_id, tool_name="add",
        posture=pb.ToolPosture.ASK_EACH_TIME))
    return (await app.create_run(USER, pb.CreateRunRequest(
        session_key="hitl", input=pb.MessageInput(text=loop_text(k)), complete=True))).run


async def _approve_to_end(app: PalyraApp, run_id: str) -> pb.Run:
    async with asyncio.timeout(ANSWERED_S):
        while True:
            run = (await app.get_run(USER, pb.GetRunRequest(run_id=run_id))).run
            if run.state in (pb.RunState.DONE, pb.RunState.FAILED, pb.RunState.CANCELLED):
                return run
            if run.state == pb.RunState.WAITING_FOR_APPROVAL and run.pending_approval_id:
                await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
                    approval_id=run.pending_approval_id, decision=pb.ApprovalDecision.APPROVE,
                    scope=pb.ApprovalScope.ONCE, reason="b"))
            else:
                await asyncio.sleep(0.005)


async def test_a_decision_for_a_run_nobody_owns_takes_the_session_over_and_lands(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    run = await _hitl_run(app_a, 2)
    first = await next_approval(app_a, run.run_id)
    b, app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    await a.stop()  # the run parked, its session released: nobody owns it
    decided = (await asyncio.wait_for(app_b.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=first.approval_id, decision=pb.ApprovalDecision.APPROVE,
        scope=pb.ApprovalScope.ONCE, reason="decided on b")), ANSWERED_S)).approval
    assert decided.state == pb.ApprovalState.APPROVED and decided.reason == "decided on b"
    assert holder(b, run.session_id) == (owner_of(b), 3, True)  # B's term now
    assert b.engine is not None
    assert run.run_id in {r.run_id for r, _ in b.engine.live_runs()}
    done = await _approve_to_end(app_b, run.run_id)
    assert done.state == pb.RunState.DONE and "result=2" in done.final_text
    b.check_tape(run.run_id)
    assert b.kinds(run.run_id).count("status:DONE") == 1


async def test_an_input_for_a_run_nobody_owns_takes_the_session_over_and_is_queued(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    run = (await app_a.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text=loop_text(1)), wait=True))).run  # idle, waiting for input
    b, app_b = await started(daemons, tmp_path, dsn, ttl_s=60)
    await a.stop()  # the run parked, its session released: nobody owns it
    await asyncio.wait_for(app_b.send_run_input(USER, pb.SendRunInputRequest(
        run_id=run.run_id, input=pb.MessageInput(text=loop_text(2)))), ANSWERED_S)
    assert holder(b, run.session_id) is not None
    assert holder(b, run.session_id)[0] == owner_of(b)  # type: ignore[index]
    done = (await asyncio.wait_for(app_b.complete_run(USER, pb.CompleteRunRequest(
        run_id=run.run_id, wait=True)), ANSWERED_S)).run
    assert done.state == pb.RunState.DONE and "result=2" in done.final_text
    assert b.kinds(run.run_id).count("user_input") == 2
    assert b.store is not None
    assert b.store.scan_entities("meta", "run_inbox:", "", 10) == []  # never handed over
    b.check_tape(run.run_id)


def _pending(store: JournalStore | None, run_id: str) -> int:
    assert store is not None
    raw = store.get_entity(RUNS, run_id, fresh=True)
    assert raw is not None
    return len(decode(RunRecord, raw).pending_inputs)


async def test_an_input_whose_sender_gave_up_is_never_queued(
    daemons: list[Harness], tmp_path: Path, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Neither daemon's own inbox reader runs: A's round is the test's. A short lease:
    # B gives up after 2 x 1 + 5 s.
    monkeypatch.setattr(inbox, "INBOX_POLL_S", 3600.0)
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=1)
    b, app_b = await started(daemons, tmp_path, dsn, ttl_s=1)
    assert a.engine is not None and a.store is not None and b.store is not None
    run = (await app_a.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text=loop_text(1)), wait=True))).run
    actor = a.engine._actors[run.run_id]  # to stall A's queueing of the input
    sending = asyncio.ensure_future(app_b.send_run_input(USER, pb.SendRunInputRequest(
        run_id=run.run_id, input=pb.MessageInput(text=loop_text(2)))))
    store_b = b.store
    await until(lambda: store_b.scan_entities("meta", "run_inbox:", "", 10))
    reader = inbox.InboxReader(a.store, a.engine._actors.get, _never, _never)
    async with actor._writer.lock:  # A reads the row, then waits for its run's lock
        reading = asyncio.ensure_future(reader.round())
        with pytest.raises(PalyraError) as gave_up:
            await sending
        assert gave_up.value.code is ErrorCode.UNAVAILABLE
        assert not reading.done()
    await reading  # A's queueing finds the row withdrawn: nothing lands
    assert _pending(a.store, run.run_id) == 0
    assert a.kinds(run.run_id).count("user_input") == 1
    assert a.store.scan_entities("meta", "run_inbox:", "", 10) == []
    assert a.store.scan_entities("meta", "run_answer:", "", 10) == []


async def _never(*_args: object) -> bool:
    return False
