"""Turn and wall-clock limits end the loop visibly (``engine.run.loop.terminate``).

A loop cut short says so: a ``message_replied`` "stopped: …" (the run's
``final_text``), ``agent_loop{TERMINATED, reason}``, and the run's
``end_reason``; the run is not failed and ends ``done`` when completed.
"""

from __future__ import annotations

import json
import time

from engine_harness import USER, Harness, fast_config, loop_text, run_to_end, slow_add
from palyra_gen.palyra import v1 as pb

from palyra.providers import ScriptedProvider


def _ending(harness: Harness, run_id: str) -> list[tuple[str, str]]:
    """The last three tape events as (kind, text or reason)."""
    out = []
    for m in harness.members(run_id)[-3:]:
        if isinstance(m, pb.MessageReplied):
            out.append(("message_replied", m.reply_text))
        elif isinstance(m, pb.AgentLoop):
            out.append((f"agent_loop:{m.phase.name}", m.reason))
        elif isinstance(m, pb.RunStatus):
            out.append((f"status:{m.state.name}", m.reason))
    return out


async def test_turn_limit_stops_the_tool_loop_with_a_reason(harness: Harness) -> None:
    harness.config = fast_config(max_turns=3)
    app = await harness.start()
    run = await run_to_end(app, loop_text(10))  # the loop wants 11 model turns
    assert run.state == pb.RunState.DONE and run.end_reason == "turn_limit"
    assert run.final_text == "stopped: turn limit (3) reached"
    members = harness.members(run.run_id)
    assert sum(isinstance(m, pb.ProviderTurnOutput) for m in members) == 3
    results = [json.loads(m.output_json)["result"] for m in members
               if isinstance(m, pb.ToolResult)]
    assert results == [1, 2, 3] and run.tool_call_count == 3
    assert _ending(harness, run.run_id) == [
        ("message_replied", "stopped: turn limit (3) reached"),
        ("agent_loop:TERMINATED", "turn_limit"),
        ("status:DONE", "turn_limit"),
    ]
    harness.check_tape(run.run_id)


async def test_a_later_normal_loop_clears_the_limit_reason(harness: Harness) -> None:
    harness.config = fast_config(max_turns=2)
    app = await harness.start()
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text=loop_text(5)), wait=True))
    assert created.run.end_reason == "turn_limit"
    assert created.run.state == pb.RunState.IN_PROGRESS  # not failed: it may go on
    await app.send_run_input(USER, pb.SendRunInputRequest(
        run_id=created.run.run_id, input=pb.MessageInput(text="plain echo")))
    done = (await app.complete_run(USER, pb.CompleteRunRequest(
        run_id=created.run.run_id, wait=True))).run
    assert done.state == pb.RunState.DONE and done.end_reason == "completed"
    assert done.final_text == "plain echo"


async def test_wall_clock_limit_during_a_slow_model_call(harness: Harness) -> None:
    harness.config = fast_config(max_wall_s=0.1)
    harness.provider_factory = lambda: ScriptedProvider(delay_s=5.0)
    app = await harness.start()
    started = time.monotonic()
    run = await run_to_end(app, "a slow answer")
    assert time.monotonic() - started < 2.0  # cut at the limit, not after the 5 s call
    assert run.state == pb.RunState.DONE and run.end_reason == "wall_clock_limit"
    assert run.final_text == "stopped: wall-clock limit (0.1 s) reached"
    assert not any(isinstance(m, pb.ProviderTurnOutput) for m in harness.members(run.run_id))
    assert _ending(harness, run.run_id) == [
        ("message_replied", "stopped: wall-clock limit (0.1 s) reached"),
        ("agent_loop:TERMINATED", "wall_clock_limit"),
        ("status:DONE", "wall_clock_limit"),
    ]
    harness.check_tape(run.run_id)


async def test_wall_clock_limit_during_a_slow_tool(harness: Harness) -> None:
    # The tool allows itself 60 s; the loop has 0.2 s: the tools port enforces the
    # smaller (the engine sets no timer of its own around a tool call).
    harness.config = fast_config(max_wall_s=0.2)
    harness.tool = slow_add(5.0)
    app = await harness.start()
    started = time.monotonic()
    run = await run_to_end(app, loop_text(3))
    assert time.monotonic() - started < 2.0  # cut at the limit, not after the 5 s tool
    assert run.state == pb.RunState.DONE and run.end_reason == "wall_clock_limit"
    [result] = [m for m in harness.members(run.run_id) if isinstance(m, pb.ToolResult)]
    assert result.timed_out and not result.success
    assert result.attestation is not None and result.attestation.timed_out
    harness.check_tape(run.run_id)


async def test_wall_clock_limit_between_turns(harness: Harness) -> None:
    # Each model call takes 0.05 s of a 0.12 s budget: a few steps run, then
    # the loop stops before (or during) the next call, never at K.
    harness.config = fast_config(max_wall_s=0.12)
    harness.provider_factory = lambda: ScriptedProvider(delay_s=0.05)
    app = await harness.start()
    run = await run_to_end(app, loop_text(20))
    assert run.state == pb.RunState.DONE and run.end_reason == "wall_clock_limit"
    assert run.final_text.startswith("stopped: wall-clock limit")
    assert 1 <= run.tool_call_count < 20
    harness.check_tape(run.run_id)


async def test_stream_client_sees_the_stop_reply(harness: Harness) -> None:
    harness.config = fast_config(max_turns=1)
    app = await harness.start()

    async def requests():  # type: ignore[no-untyped-def]
        yield pb.RunStreamRequest(v=1, input=pb.MessageInput(text=loop_text(4)))

    events = [r.event async for r in app.run_stream(USER, requests())]
    replies = [e.message_replied.reply_text for e in events if e.message_replied]
    assert replies == ["stopped: turn limit (1) reached"]
    assert events[-1].status is not None and events[-1].status.state == pb.RunState.DONE
