"""How a step becomes durable: one commit for a read-only step, allow-first otherwise.

A read-only tool the policy allows runs before anything of its step is
committed; its proposal, decision, result and attestation land in one append.
A tool with side effects (allowed by posture) runs only after its proposal and
allow decision are durable. Both are observed from inside the tool, by reading
the real journal while the tool runs.
"""

from __future__ import annotations

from typing import Any

import msgspec
from engine_harness import Harness, loop_text, run_to_end
from palyra_gen.palyra import v1 as pb

from palyra.policy import PolicyConfig, Posture
from palyra.tools import Capability, ToolContext, ToolOutput, ToolSpec


class AddArgs(msgspec.Struct, frozen=True):
    a: int | float
    b: int | float


def watching_add(harness: Harness, seen: list[int], caps: frozenset[Capability]) -> ToolSpec[Any]:
    """``add`` that records how many proposals of its run are durable when it runs."""

    async def handler(args: AddArgs, ctx: ToolContext) -> ToolOutput:
        assert harness.store is not None
        tape = harness.store.read_tape(ctx.run_id, -1, 1000).events
        seen.append(sum(1 for e in tape if e.kind == "tape.tool_proposal"))
        return ToolOutput({"result": args.a + args.b})

    return ToolSpec("add", "Add two numbers.", AddArgs, caps, handler, timeout_s=10.0)


async def test_read_only_step_is_one_commit(harness: Harness) -> None:
    seen: list[int] = []
    harness.tool = watching_add(harness, seen, frozenset({Capability.READ_ONLY}))
    app = await harness.start()
    assert harness.store is not None
    before = harness.store.stats().commits
    run = await run_to_end(app, loop_text(5))
    commits = harness.store.stats().commits - before
    assert run.final_text == "result=5"
    # Call i runs while only the i-1 earlier proposals are on the tape.
    assert seen == [0, 1, 2, 3, 4]
    # Five steps, plus the final answer and the run's accept/complete commits.
    assert commits <= 5 + 3, commits
    members = harness.members(run.run_id)
    kinds = [type(m).__name__ for m in members]
    first = kinds.index("ToolProposal")
    # One event for the call and its decision, one for the result and its attestation.
    assert kinds[first:first + 3] == ["ToolProposal", "ToolResult", "AgentLoop"]
    proposal, result = members[first], members[first + 1]
    assert isinstance(proposal, pb.ToolProposal) and proposal.decision is not None
    assert isinstance(result, pb.ToolResult) and result.attestation is not None
    harness.check_tape(run.run_id)


async def test_tool_with_side_effects_runs_after_a_durable_allow(harness: Harness) -> None:
    seen: list[int] = []
    harness.tool = watching_add(harness, seen, frozenset({Capability.FILESYSTEM_WRITE}))
    harness.policy_config = PolicyConfig(tool_postures={"add": Posture.ALWAYS_ALLOW})
    app = await harness.start()
    run = await run_to_end(app, loop_text(3))
    assert run.final_text == "result=3"
    # Call i runs only once its own proposal (and the allow with it) is durable.
    assert seen == [1, 2, 3]
    decisions = [m.decision for m in harness.members(run.run_id)
                 if isinstance(m, pb.ToolProposal) and m.decision is not None]
    assert [d.outcome for d in decisions] == [pb.ToolDecisionOutcome.ALLOW] * 3
    harness.check_tape(run.run_id)
