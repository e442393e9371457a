"""Tool results are fed back in the order the model asked for them (REFERENCE §11).

One turn asks for three calls to tools of different latency; the slowest is
first. They run together (a parallel read-only group), yet the tape's results and
the messages of the next model call must follow the requested order, not
completion order.
"""

from __future__ import annotations

import json

from engine_harness import Harness, run_to_end
from palyra_gen.palyra import v1 as pb
from planned_provider import PlannedProvider, calls_then, recording_tool

CALLS = [("t.slow", {"text": "first"}), ("t.fast", {"text": "second"}),
         ("t.mid", {"text": "third"})]
DELAYS = {"t.slow": 0.15, "t.fast": 0.0, "t.mid": 0.05}


async def test_results_follow_the_requested_order(harness: Harness) -> None:
    seen: list[tuple[str, str]] = []
    provider = PlannedProvider(calls_then(CALLS, "all three done"))
    harness.provider_factory = lambda: provider
    harness.extra_tools = tuple(recording_tool(name, seen, delay_s=delay)
                                for name, delay in DELAYS.items())
    app = await harness.start()
    run = await run_to_end(app, "call the three tools")
    assert run.state == pb.RunState.DONE and run.final_text == "all three done"
    wanted = [name for name, _ in CALLS]

    members = harness.members(run.run_id)
    proposals = [m for m in members if isinstance(m, pb.ToolProposal)]
    results = [m for m in members if isinstance(m, pb.ToolResult)]
    assert [p.tool_name for p in proposals] == wanted
    assert [r.tool_name for r in results] == wanted
    assert [r.proposal_id for r in results] == [p.proposal_id for p in proposals]
    assert [json.loads(r.output_json)["text"] for r in results] == ["first", "second", "third"]
    # The three are read-only and allowed outright: they ran together (a parallel
    # group), so they finished fastest first, and the tape still follows the request.
    assert seen == [("t.fast", "second"), ("t.mid", "third"), ("t.slow", "first")]

    # What the model got back on its next call: the assistant turn with the
    # three calls, then one tool message per call, in the same order.
    assert len(provider.requests) == 2
    messages = provider.requests[1].messages
    assistant = max(i for i, m in enumerate(messages) if m.role == "assistant")
    calls = messages[assistant].tool_calls
    assert [c.name for c in calls] == wanted
    assert [c.arguments for c in calls] == [args for _, args in CALLS]
    tool_messages = messages[assistant + 1:]
    assert [m.role for m in tool_messages] == ["tool"] * 3
    assert [m.tool_call_id for m in tool_messages] == [c.id for c in calls]
    assert [json.loads(m.content)["tool"] for m in tool_messages] == wanted
    harness.check_tape(run.run_id)
