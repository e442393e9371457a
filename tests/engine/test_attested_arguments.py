"""A tool result's attestation hashes the arguments exactly as its proposal tapes them.

The engine hands the proposal's ``input_json`` to the tools port, which attests
with it instead of encoding the arguments again: an auditor recomputing the
digest from the tape must get the taped one.
"""

from __future__ import annotations

from typing import Any

import pytest
from engine_harness import ADMIN, USER, Harness, loop_text, next_approval, run_to_end
from palyra_gen.palyra import v1 as pb

from palyra.tools import ToolResult
from palyra.tools._attestation import attest


@pytest.mark.parametrize("k", [1, 3])
async def test_each_attestation_is_recomputable_from_the_taped_call(harness: Harness,
                                                                     k: int) -> None:
    app = await harness.start()
    run = await run_to_end(app, loop_text(k))
    assert run.state == pb.RunState.DONE
    _assert_recomputable(harness.members(run.run_id), k)

async def test_an_approved_calls_attestation_is_recomputable_from_the_taped_call(
        harness: Harness) -> None:
    """An approved call (its result in its decision's append) attests the taped text too,
    and so does the one decided after a restart (its arguments read back from the tape)."""
    app = await harness.start()
    session = (await app.resolve_session(USER, pb.ResolveSessionRequest(
        session_key="attested"))).session
    await app.set_tool_posture(USER, pb.SetToolPostureRequest(
        session_id=session.session_id, tool_name="add", posture=pb.ToolPosture.ASK_EACH_TIME))
    created = await app.create_run(USER, pb.CreateRunRequest(
        session_key="attested", input=pb.MessageInput(text=loop_text(2)), complete=True))
    run_id = created.run.run_id
    for restart in (False, True):
        approval = await next_approval(app, run_id)
        if restart:
            app = await harness.restart()
        await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
            approval_id=approval.approval_id, decision=pb.ApprovalDecision.APPROVE,
            reason="ok"))
    run = (await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))).run
    assert run.state == pb.RunState.DONE and run.final_text == "result=2"
    _assert_recomputable(harness.members(run_id), 2)


def _assert_recomputable(members: list[Any], k: int) -> None:
    proposals = {m.proposal_id: m for m in members if isinstance(m, pb.ToolProposal)}
    results = [m for m in members if isinstance(m, pb.ToolResult)]
    assert len(results) == k
    for result in results:
        call, attestation = proposals[result.proposal_id], result.attestation
        assert attestation is not None
        again = attest(call.tool_name, call.input_json, ToolResult(
            result.success, result.output_json, result.error, result.timed_out,
            result.truncated, facts=dict(attestation.facts)))
        assert attestation.execution_sha256 == again
