"""Paths the outside campaign did not re-test (issue 35, item 11), tested here.

A model that never stops calling tools is ended by the turn limit and by the run's
tool budget, with a tape that grows by a bounded amount per turn; a tool that returns
a very large output is capped before it reaches the tape or the model; and another
principal's agent-scoped memory never reaches a run of that agent. (The wall-clock
limit hit during a streamed reply is ``test_long_replies.py``'s
``test_wall_clock_limit_mid_stream_ends_cleanly``; Standard Webhooks ``v1a`` ingress end
to end is ``tests/channels/test_webhooks_e2e.py``'s ``test_ed25519_and_key_rotation``.)
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
from engine_harness import ADMIN, OTHER_USER, USER, Harness, fast_config, loop_text, run_to_end
from palyra_gen.palyra import v1 as pb
from planned_provider import PlannedProvider, reply

from palyra.adapters import MemoryContext
from palyra.journal import JournalStore
from palyra.memory.service import Memory
from palyra.policy import PolicyConfig, PolicyGate
from palyra.tools import Capability, ToolContext, ToolOutput, ToolSpec

FOREVER = 10**9  # the model wants this many tool calls: it never stops on its own
EVENTS_PER_TURN = 8  # model output, proposal, decision, call, result, tokens... with room


async def test_a_model_that_never_stops_is_ended_by_the_turn_limit(harness: Harness) -> None:
    sizes = []
    for turns in (10, 40):
        harness.config = fast_config(max_turns=turns)
        app = await harness.start()
        run = await run_to_end(app, loop_text(FOREVER))
        assert run.end_reason == "turn_limit" and run.tool_call_count == turns
        sizes.append(len(harness.tape(run.run_id)))
        await harness.stop()
    # The tape grows by a bounded amount per turn, not with what the model wants.
    assert sizes[1] - sizes[0] <= 30 * EVENTS_PER_TURN, sizes


async def test_the_tool_budget_ends_a_runaway_loop(harness: Harness) -> None:
    harness.config = fast_config(max_turns=30)
    harness.policy_config = PolicyConfig(run_tool_budget=5)
    app = await harness.start()
    run = await run_to_end(app, loop_text(FOREVER))
    members = harness.members(run.run_id)
    ran = [m for m in members if isinstance(m, pb.ToolResult) and m.success]
    assert len(ran) == 5 and run.tool_call_count <= 30
    assert run.end_reason == "turn_limit"
    assert len(members) <= 30 * EVENTS_PER_TURN + 20
    harness.check_tape(run.run_id)


class _AddArgs(msgspec.Struct, frozen=True):
    a: int | float
    b: int | float


def _huge_add(size: int) -> ToolSpec[Any]:
    async def handler(args: _AddArgs, ctx: ToolContext) -> ToolOutput:
        return ToolOutput({"result": args.a + args.b, "padding": "x" * size})
    return ToolSpec("add", "Add, with a very large output.", _AddArgs,
                    frozenset({Capability.READ_ONLY}), handler)


async def test_a_very_large_tool_output_is_capped(harness: Harness) -> None:
    big = _huge_add(32 * 1024 * 1024)
    harness.tool = big
    app = await harness.start()
    run = await run_to_end(app, loop_text(2))
    results = [m for m in harness.members(run.run_id) if isinstance(m, pb.ToolResult)]
    assert len(results) == 2 and run.state == pb.RunState.DONE
    for result in results:
        assert result.truncated and len(result.output_json) <= big.max_output_bytes + 1024
        assert json.loads(result.output_json)["original_bytes"] > 32 * 1024 * 1024
    stored = sum(len(json.dumps(e.payload)) for e in harness.tape(run.run_id))
    assert 2 * big.max_output_bytes // 2 < stored < 4 * big.max_output_bytes + 64 * 1024


async def test_another_principals_agent_memory_never_reaches_a_run(harness: Harness) -> None:
    provider = PlannedProvider(lambda request: reply("noted"))
    harness.provider_factory = lambda: provider
    made: list[Memory] = []

    def context(store: JournalStore, gate: PolicyGate) -> MemoryContext:
        made.append(Memory(store))
        return MemoryContext(made[0], gate)

    harness.context_factory = context
    app = await harness.start()
    agent = (await app.create_agent(ADMIN, pb.CreateAgentRequest(
        agent=pb.Agent(display_name="support")))).agent
    assert agent is not None
    memory = made[0]
    mine = await memory.ingest("user:alice", "the support queue is triage-eu",
                               agent_id=agent.agent_id)
    await memory.ingest("user:mallory", "the support queue password is hunter2",
                        agent_id=agent.agent_id)
    for ctx, seen, unseen in ((USER, "triage-eu", "hunter2"),
                              (OTHER_USER, "hunter2", "triage-eu")):
        run = await app.create_run(ctx, pb.CreateRunRequest(
            v=1, session_key=f"q-{ctx.identity.principal if ctx.identity else ''}",
            agent_id=agent.agent_id, input=pb.MessageInput(text="what is the support queue?"),
            complete=True, wait=True))
        assert run.run is not None
        sent = "".join(m.content for m in provider.requests[-1].messages)
        assert seen in sent and unseen not in sent, sent
    stages = [m for m in harness.members(run.run.run_id) if isinstance(m, pb.ContextStage)]
    assert mine.memory_id not in {i for s in stages for i in s.item_ids}
