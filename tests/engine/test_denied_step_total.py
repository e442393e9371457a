"""A denied step does not reset the scripted model's running total (issue 13, item 5).

Through the real engine, Cedar and journal: step 1 approved, step 2 denied by
a human; the reply keeps the total of step 1.
"""

from __future__ import annotations

from engine_harness import ADMIN, USER, Harness, loop_text, next_approval
from palyra_gen.palyra import v1 as pb


async def test_denied_step_keeps_the_total(harness: Harness) -> None:
    app = await harness.start()
    resolved = await app.resolve_session(USER, pb.ResolveSessionRequest(session_key="deny"))
    await app.set_tool_posture(USER, pb.SetToolPostureRequest(
        session_id=resolved.session.session_id, tool_name="add",
        posture=pb.ToolPosture.ASK_EACH_TIME))
    created = await app.create_run(USER, pb.CreateRunRequest(
        session_key="deny", input=pb.MessageInput(text=loop_text(2)), complete=True))
    run_id = created.run.run_id
    for decision in (pb.ApprovalDecision.APPROVE, pb.ApprovalDecision.DENY):
        approval = await next_approval(app, run_id)
        await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
            approval_id=approval.approval_id, decision=decision))
    done = await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))
    assert done.run.state == pb.RunState.DONE
    assert done.run.final_text == "result=1"
    harness.check_tape(run_id)
