"""Parallel read-only groups: a turn's leading read-only calls that the policy
allows outright run together, and their proposals and results are one append in
the model's order; approvals and side effects stay sequential; a crash in the
middle of a group re-runs only the group's read-only calls."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import replace
from typing import Any

import msgspec
import pytest
from engine_harness import ADMIN, USER, Harness, fast_config, next_approval, run_to_end
from palyra_gen.palyra import v1 as pb

from palyra.policy import PolicyConfig, Posture
from palyra.tools import Capability, ToolContext, ToolOutput, ToolSpec


class MeetArgs(msgspec.Struct, frozen=True):
    id: int
    delay: float = 0.0


def meeting(parties: int, ran: Counter[int]) -> ToolSpec[Any]:
    """A read-only tool whose calls wait for each other: run one at a time, they
    never meet (each call gives up after 5 s)."""
    barrier = asyncio.Barrier(parties)

    async def handler(args: MeetArgs, ctx: ToolContext) -> ToolOutput:
        ran[args.id] += 1
        async with asyncio.timeout(5):
            await barrier.wait()
        await asyncio.sleep(args.delay)  # finish in another order than asked
        return ToolOutput({"text": str(args.id)})

    return ToolSpec("meet", "Meet the other calls.", MeetArgs,
                    frozenset({Capability.READ_ONLY}), handler, timeout_s=10.0)


def _calls(*ids: tuple[int, float]) -> str:
    return "\n".join(f'/call meet {{"id": {i}, "delay": {d}}}' for i, d in ids)


def _kinds(h: Harness, run_id: str) -> list[str]:
    return [k for k in h.kinds(run_id) if k.startswith("tool_")
            or k == "agent_loop:TURN_COMPLETED"]


async def test_a_read_only_group_runs_together_in_the_models_order(harness: Harness) -> None:
    ran: Counter[int] = Counter()
    harness.extra_tools = (meeting(3, ran),)
    app = await harness.start()
    run = await run_to_end(app, _calls((1, 0.2), (2, 0.1), (3, 0.0)))
    assert run.final_text.splitlines() == ['{"text":"1"}', '{"text":"2"}', '{"text":"3"}']
    members = harness.members(run.run_id)
    proposals = [m for m in members if isinstance(m, pb.ToolProposal)]
    results = [m for m in members if isinstance(m, pb.ToolResult)]
    assert [r.proposal_id for r in results] == [p.proposal_id for p in proposals]
    # One append: the three proposals, then the three results, then the turn's end.
    assert _kinds(harness, run.run_id)[:7] == ["tool_proposal"] * 3 + ["tool_result"] * 3 + [
        "agent_loop:TURN_COMPLETED"]
    assert ran == Counter({1: 1, 2: 1, 3: 1})
    harness.check_tape(run.run_id)


async def test_approvals_and_side_effects_stay_sequential(harness: Harness) -> None:
    ran: Counter[int] = Counter()
    harness.extra_tools = (meeting(2, ran),)
    app = await harness.start()
    text = (_calls((1, 0.0), (2, 0.0)) + '\n/call fs.write {"path": "w.txt", "content": "x"}'
            + '\n/call echo {"text": "after"}')
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text=text), complete=True))
    approval = await next_approval(app, created.run.run_id)
    assert approval.tool_name == "fs.write" and ran == Counter({1: 1, 2: 1})
    assert not (harness.data_dir / "w.txt").exists()
    await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=approval.approval_id, decision=pb.ApprovalDecision.APPROVE))
    run = (await app.complete_run(USER, pb.CompleteRunRequest(
        run_id=created.run.run_id, wait=True))).run
    lines = run.final_text.splitlines()
    assert lines[:2] == ['{"text":"1"}', '{"text":"2"}'] and json.loads(lines[3]) == {
        "text": "after"}
    kinds = _kinds(harness, run.run_id)
    assert kinds[:6] == ["tool_proposal"] * 4 + ["tool_result"] * 2
    assert kinds[6:11] == ["tool_approval_request", "tool_approval_response", "tool_result",
                         "tool_result", "agent_loop:TURN_COMPLETED"]
    harness.check_tape(run.run_id)


@pytest.mark.parametrize("parallel", [8, 1])
async def test_a_crash_mid_group_re_runs_only_the_read_only_calls(harness: Harness,
                                                                   parallel: int) -> None:
    ran: Counter[str] = Counter()

    async def slow(args: MeetArgs, ctx: ToolContext) -> ToolOutput:
        ran[f"read{args.id}"] += 1
        await asyncio.sleep(args.delay)
        return ToolOutput({"text": str(args.id)})

    async def quick(args: MeetArgs, ctx: ToolContext) -> ToolOutput:
        ran[f"read{args.id}"] += 1
        return ToolOutput({"text": str(args.id)})

    async def side_effect(args: MeetArgs, ctx: ToolContext) -> ToolOutput:
        ran["write"] += 1
        return ToolOutput({"text": "written"})

    harness.extra_tools = (
        ToolSpec("meet", "Slow read.", MeetArgs, frozenset({Capability.READ_ONLY}), slow),
        ToolSpec("poke", "A side effect.", MeetArgs, frozenset({Capability.FILESYSTEM_WRITE}),
                 side_effect))
    harness.config = replace(fast_config(drain_grace_s=0.0), parallel_read_only_tools=parallel)
    harness.policy_config = PolicyConfig(tool_postures={"poke": Posture.ALWAYS_ALLOW})
    app = await harness.start()
    text = _calls((1, 30), (2, 30)) + '\n/call poke {"id": 0}'
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text=text), complete=True))
    async with asyncio.timeout(5):
        while True:
            if ran["read1"]:
                break
            await asyncio.sleep(0.005)
    # The daemon stops while the group runs, then comes back with quick reads.
    harness.extra_tools = (
        ToolSpec("meet", "Quick read.", MeetArgs, frozenset({Capability.READ_ONLY}), quick),
        harness.extra_tools[1])
    ran_before = Counter(ran)
    app = await harness.restart()
    assert ran["write"] == 0
    run = (await app.complete_run(USER, pb.CompleteRunRequest(
        run_id=created.run.run_id, wait=True))).run
    assert run.state == pb.RunState.DONE
    assert ran["write"] == 1  # the side effect ran once, after the restart
    assert ran["read1"] == ran_before["read1"] + 1  # the read-only calls ran again
    harness.check_tape(run.run_id)
