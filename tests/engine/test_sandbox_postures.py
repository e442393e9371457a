"""process.run's sandbox tier follows the call's posture (issue 31, item 3).

Through the engine, the real Cedar gate and real sandboxes: the posture is
resolved when the call is decided, taped with the decision, stated in the
approval prompt's risk, and obeyed when the call runs, even after a restart
between the approval request and the decision.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engine_harness import ADMIN, USER, Harness, next_approval
from palyra_gen.palyra import v1 as pb

from palyra.policy import PolicyConfig, Posture
from palyra.tools import SandboxConfig, ToolsConfig

PYTHON = "/usr/bin/python3"
# Writes a file into the workspace; only a read-only tier c refuses it.
WRITE = "open('made-by-the-tool.txt', 'w').write('x'); print('wrote')"


def _call() -> str:
    return "/call process.run " + json.dumps({"argv": [PYTHON, "-c", WRITE]})


@pytest.fixture
def confined(harness: Harness) -> Harness:
    """Unattended calls (always_allow) at tier c with a read-only workspace; asked ones at b."""
    harness.tools_config = ToolsConfig(
        process_exec_enabled=True,
        sandbox=SandboxConfig(tier="b", workspace="ro", postures={"always_allow": "c"}))
    harness.policy_config = PolicyConfig(process_exec_enabled=True)
    return harness


def _decision(harness: Harness, run_id: str) -> pb.ToolDecision:
    [proposal] = [m for m in harness.members(run_id) if isinstance(m, pb.ToolProposal)]
    assert proposal.decision is not None
    return proposal.decision


def _result(harness: Harness, run_id: str) -> pb.ToolResult:
    [result] = [m for m in harness.members(run_id) if isinstance(m, pb.ToolResult)]
    assert result.attestation is not None
    return result


async def _approve(app: object, approval: pb.Approval) -> None:
    await app.decide_approval(ADMIN, pb.DecideApprovalRequest(  # type: ignore[attr-defined]
        approval_id=approval.approval_id, decision=pb.ApprovalDecision.APPROVE,
        scope=pb.ApprovalScope.ONCE))


async def test_an_asked_call_runs_at_its_postures_tier(confined: Harness) -> None:
    app = await confined.start()
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text=_call()), complete=True))
    approval = await next_approval(app, created.run.run_id)
    assert approval.prompt.risk_level == pb.RiskLevel.HIGH  # tier b can write
    await _approve(app, approval)
    run = (await app.complete_run(USER, pb.CompleteRunRequest(
        run_id=created.run.run_id, wait=True))).run
    assert _decision(confined, run.run_id).posture == "ask_each_time"
    facts = _result(confined, run.run_id).attestation.facts  # type: ignore[union-attr]
    assert facts["sandbox.tier"] == "b" and facts["sandbox.posture"] == "ask_each_time"
    assert (confined.data_dir / "made-by-the-tool.txt").read_text() == "x"


async def test_an_unattended_call_runs_at_the_tighter_tier(confined: Harness) -> None:
    # The operator lets process.run run unasked (the config's posture).
    confined.policy_config = PolicyConfig(
        process_exec_enabled=True, tool_postures={"process.run": Posture.ALWAYS_ALLOW})
    app = await confined.start()
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text=_call()), complete=True, wait=True))
    run = (await app.complete_run(USER, pb.CompleteRunRequest(
        run_id=created.run.run_id, wait=True))).run
    assert run.state == pb.RunState.DONE, run.last_error
    assert _decision(confined, run.run_id).posture == "always_allow"
    result = _result(confined, run.run_id)
    facts = result.attestation.facts  # type: ignore[union-attr]
    assert facts["sandbox.tier"] == "c" and facts["sandbox.workspace"] == "ro"
    output = json.loads(result.output_json)
    assert output["exit_code"] != 0 and "Read-only file system" in output["stderr"]
    assert not (confined.data_dir / "made-by-the-tool.txt").exists()


async def test_the_taped_posture_holds_across_a_restart(harness: Harness) -> None:
    # Asked calls at a read-only tier c: the prompt says MEDIUM, and the call
    # approved after a restart still runs there (the posture comes from the tape).
    harness.tools_config = ToolsConfig(
        process_exec_enabled=True,
        sandbox=SandboxConfig(tier="b", workspace="ro", postures={"ask_each_time": "c"}))
    harness.policy_config = PolicyConfig(process_exec_enabled=True)
    app = await harness.start()
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text=_call()), complete=True))
    approval = await next_approval(app, created.run.run_id)
    assert approval.prompt.risk_level == pb.RiskLevel.MEDIUM
    app = await harness.restart()
    await _approve(app, approval)
    run = (await app.complete_run(USER, pb.CompleteRunRequest(
        run_id=created.run.run_id, wait=True))).run
    facts = _result(harness, run.run_id).attestation.facts  # type: ignore[union-attr]
    assert facts["sandbox.tier"] == "c" and facts["sandbox.posture"] == "ask_each_time"
    assert not (harness.data_dir / "made-by-the-tool.txt").exists()


def test_a_posture_table_names_real_postures_and_tiers(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not one of"):
        SandboxConfig(postures={"disabled": "c"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="not a, b or c"):
        SandboxConfig(postures={"always_allow": "z"})  # type: ignore[dict-item]
    assert SandboxConfig(tier="b", postures={"always_allow": "c"}).for_posture(
        "always_allow").tier == "c"
