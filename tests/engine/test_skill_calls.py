"""Skill calls through the whole flow: the example skill's result and attestation on
the tape, a runaway skill stopped by fuel on the tape, a quarantined skill denied
before any approval."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from engine_harness import Harness, run_to_end
from palyra_gen.palyra import v1 as pb

from palyra.policy import PolicyConfig
from palyra.tools.skills import Limits, install, set_state

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "skills" / "add"
SPIN = '(module (func (export "spin") (result f64) (loop br 0) f64.const 0))'


def _results(h: Harness, run_id: str) -> list[pb.ToolResult]:
    return [m for m in h.members(run_id) if isinstance(m, pb.ToolResult)]


async def test_the_example_skill_on_the_tape(tmp_path: Path) -> None:
    install(EXAMPLE, tmp_path / "skills")
    h = Harness(tmp_path / "data", skills_dir=tmp_path / "skills")
    app = await h.start()
    try:
        run = await run_to_end(app, '/call skill.demo.add {"a": 1.5, "b": 2}')
        assert json.loads(run.final_text) == {"result": 3.5}
        [proposal] = [m for m in h.members(run.run_id) if isinstance(m, pb.ToolProposal)]
        assert proposal.decision.outcome == pb.ToolDecisionOutcome.ALLOW  # read-only skill
        [result] = _results(h, run.run_id)
        assert result.attestation is not None and result.attestation.executor == "wasm"
        assert result.attestation.facts["skill.id"] == "demo@1.0.0"
    finally:
        await h.stop()


async def test_a_runaway_skill_is_stopped_on_the_tape(tmp_path: Path) -> None:
    source = tmp_path / "spin"
    source.mkdir()
    (source / "spin.wat").write_text(SPIN)
    (source / "skill.json").write_text(json.dumps({
        "name": "spin", "version": "1", "module": "spin.wat",
        "sha256": hashlib.sha256(SPIN.encode()).hexdigest(),
        "tools": [{"name": "spin", "description": "loops", "export": "spin"}]}))
    install(source, tmp_path / "skills")
    h = Harness(tmp_path / "data", skills_dir=tmp_path / "skills",
                skill_limits=Limits(fuel=2_000_000))
    app = await h.start()
    try:
        run = await run_to_end(app, "/call skill.spin.spin")
        [result] = _results(h, run.run_id)
        assert not result.success and "all fuel consumed" in result.error
        assert result.attestation is not None
        assert result.attestation.facts["skill.stopped"] == "fuel"
    finally:
        await h.stop()


async def test_a_quarantined_skill_is_denied_before_any_approval(tmp_path: Path) -> None:
    shutil.rmtree(tmp_path / "skills", ignore_errors=True)
    install(EXAMPLE, tmp_path / "skills")
    set_state(tmp_path / "skills" / "demo", "quarantined")
    h = Harness(tmp_path / "data", skills_dir=tmp_path / "skills")
    app = await h.start()
    try:
        run = await run_to_end(app, '/call skill.demo.add {"a": 1, "b": 2}')
        [proposal] = [m for m in h.members(run.run_id) if isinstance(m, pb.ToolProposal)]
        assert proposal.decision.outcome == pb.ToolDecisionOutcome.DENY
        assert proposal.decision.policy_ids == ["palyra.skills.forbid_not_enabled"]
        assert "skill.execute" in proposal.decision.reason
        assert not proposal.approval_required
        assert not [m for m in h.members(run.run_id) if isinstance(m, pb.ToolApprovalRequest)]
    finally:
        await h.stop()


async def test_an_operator_policy_sees_the_skills_id_and_capabilities(tmp_path: Path) -> None:
    install(EXAMPLE, tmp_path / "skills")
    policies = tmp_path / "config" / "policies"
    policies.mkdir(parents=True)
    (policies / "skills.cedar").write_text(
        'forbid (principal, action == Action::"skill.execute", resource)\n'
        'when { context.skill_id == "demo@1.0.0" && context.capabilities.contains("read_only") };\n')
    h = Harness(tmp_path / "data", skills_dir=tmp_path / "skills",
                policy_config=PolicyConfig(config_dir=tmp_path / "config"))
    app = await h.start()
    try:
        run = await run_to_end(app, '/call skill.demo.add {"a": 1, "b": 2}')
        [proposal] = [m for m in h.members(run.run_id) if isinstance(m, pb.ToolProposal)]
        assert proposal.decision.outcome == pb.ToolDecisionOutcome.DENY
        assert proposal.decision.policy_ids == ["policies/skills.cedar#0"]
        assert not _results(h, run.run_id)[0].success
    finally:
        await h.stop()
