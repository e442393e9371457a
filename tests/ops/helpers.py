"""One tool-loop run that waits for approvals, decided by an operator as they come."""

from __future__ import annotations

import asyncio

from palyra_gen.palyra import v1 as pb

from palyra.app import CallContext, PalyraApp
from palyra.testing.apps import tool_loop_text

USER = CallContext.for_principal("user:ops", "01J00000000000000000000000")
OPERATOR = CallContext.for_principal("admin:ops", "01J00000000000000000000000")


async def run_with_approvals(app: PalyraApp, steps: int = 2, key: str = "ops") -> pb.Run:
    """A ``steps``-call tool loop where every ``add`` call is approved by an operator."""
    resolved = await app.resolve_session(USER, pb.ResolveSessionRequest(session_key=key))
    assert resolved.session is not None
    await app.set_tool_posture(USER, pb.SetToolPostureRequest(
        session_id=resolved.session.session_id, tool_name="add",
        posture=pb.ToolPosture.ASK_EACH_TIME))
    created = await app.create_run(USER, pb.CreateRunRequest(
        v=1, session_key=key, input=pb.MessageInput(text=tool_loop_text(steps)), complete=True))
    assert created.run is not None
    run_id = created.run.run_id
    async with asyncio.timeout(30):
        while True:
            run = (await app.get_run(USER, pb.GetRunRequest(run_id=run_id))).run
            assert run is not None
            if run.state in (pb.RunState.DONE, pb.RunState.FAILED, pb.RunState.CANCELLED):
                return run
            if run.state == pb.RunState.WAITING_FOR_APPROVAL and run.pending_approval_id:
                await app.decide_approval(OPERATOR, pb.DecideApprovalRequest(
                    approval_id=run.pending_approval_id, decision=pb.ApprovalDecision.APPROVE,
                    scope=pb.ApprovalScope.ONCE, reason="ops test"))
            await asyncio.sleep(0.005)
