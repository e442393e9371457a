"""A run parked on an approval waits on its decision itself, and stopping it keeps the rules.

The run awaits its mailbox's decision future directly (``toolflow._decision_within``),
so stopping the run's work cancels that future too. A decision that arrives after
the work was stopped but before the run has stopped is still taken and its decider
told it was not recorded (``UNAVAILABLE`` when the daemon parks the run, to retry
after the restart), never ``APPROVAL_ALREADY_DECIDED``: the approval stays pending.
And the wait still ends on time.
"""

from __future__ import annotations

import asyncio

import pytest
from engine_harness import ADMIN, USER, Harness, loop_text, next_approval
from palyra_gen.palyra import v1 as pb

from palyra.app import PalyraApp
from palyra.core.errors import ErrorCode, PalyraError
from palyra.engine.model.approvals import Decision
from palyra.engine.model.lifecycle import ApprovalEvent


async def _park(app: PalyraApp, key: str) -> str:
    resolved = await app.resolve_session(USER, pb.ResolveSessionRequest(session_key=key))
    await app.set_tool_posture(USER, pb.SetToolPostureRequest(
        session_id=resolved.session.session_id, tool_name="add",
        posture=pb.ToolPosture.ASK_EACH_TIME))
    created = await app.create_run(USER, pb.CreateRunRequest(
        session_key=key, input=pb.MessageInput(text=loop_text(1)), complete=True))
    return created.run.run_id


async def test_a_decision_between_the_stop_and_the_end_is_told_unavailable(
        harness: Harness) -> None:
    app = await harness.start()
    run_id = await _park(app, "park-race")
    approval = await next_approval(app, run_id)
    engine = harness.engine
    assert engine is not None
    actor = engine._actors[run_id]
    # The run record says WAITING_FOR_APPROVAL once the request's commit lands; the run's
    # task takes up its wait (phase "approval") when it next runs, which may be later.
    for _ in range(5000):
        if actor.phase == "approval":
            break
        await asyncio.sleep(0.001)
    assert actor.phase == "approval"
    parking = asyncio.ensure_future(actor.park(0.0))
    await asyncio.sleep(0)  # park's first step: the run's work is cancelled, not yet ended
    assert not parking.done()
    ack = actor.deliver(approval.approval_id, Decision(
        ApprovalEvent.APPROVE, "once", 0, "late", "admin:ops", 1))
    await parking
    with pytest.raises(PalyraError) as err:
        await ack
    assert err.value.code is ErrorCode.UNAVAILABLE
    # Nothing of the decision was written: after the restart the approval is still pending.
    app = await harness.restart()
    again = await next_approval(app, run_id)
    assert again.approval_id == approval.approval_id
    assert again.state == pb.ApprovalState.PENDING
    await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=approval.approval_id, decision=pb.ApprovalDecision.APPROVE, reason="ok"))
    run = (await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))).run
    assert run.state == pb.RunState.DONE and run.final_text == "result=1"
    harness.check_tape(run_id)


async def test_the_wait_ends_on_time_with_a_timeout_decision(harness: Harness) -> None:
    harness.config = harness.config.__class__(approval_timeout_s=0.2)
    app = await harness.start()
    run_id = await _park(app, "time-out")
    approval = await next_approval(app, run_id)
    async with asyncio.timeout(5.0):
        while True:
            got = await app.get_approval(ADMIN, pb.GetApprovalRequest(
                approval_id=approval.approval_id))
            if got.approval.state != pb.ApprovalState.PENDING:
                break
            await asyncio.sleep(0.02)
    assert got.approval.state == pb.ApprovalState.TIMED_OUT
    assert got.approval.decided_by == "system:timeout"
    with pytest.raises(PalyraError) as err:
        await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
            approval_id=approval.approval_id, decision=pb.ApprovalDecision.APPROVE))
    assert err.value.code is ErrorCode.APPROVAL_ALREADY_DECIDED
