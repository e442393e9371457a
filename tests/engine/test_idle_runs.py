"""The idle-run policy: an API run left open with no input is completed, never stuck.

A run created with ``complete=false`` whose client never sends more input nor
``CompleteRun`` ends ``done`` with ``end_reason`` ``idle_timeout`` once it was
idle for ``EngineConfig.idle_complete_s`` (REFERENCE Part B 2). The deadline
counts from the journaled ``last_active_ms``, so it survives restarts. All
timing runs on a fake engine clock; ``Engine.recheck_idle`` makes the idle
timers look at the clock after it jumped.
"""

from __future__ import annotations

import asyncio

from engine_harness import USER, Harness, fast_config, loop_text, next_approval
from palyra_gen.palyra import v1 as pb

from palyra.app import PalyraApp
from palyra.app._convert import identity_of

T0 = 1_700_000_000_000
IDLE_S = 3600


def _fake_clock(harness: Harness, idle_s: float = IDLE_S, **config: object) -> list[int]:
    clock = [T0]
    harness.now_ms = lambda: clock[0]
    harness.config = fast_config(idle_complete_s=idle_s, **config)
    return clock


async def _open_run(app: PalyraApp, text: str = "hello", session_key: str = "idle") -> str:
    """CreateRun without ``complete``, waited until its first loop is idle."""
    created = await app.create_run(USER, pb.CreateRunRequest(
        session_key=session_key, input=pb.MessageInput(text=text), wait=True))
    assert created.run.state == pb.RunState.IN_PROGRESS
    return created.run.run_id


async def _get(app: PalyraApp, run_id: str) -> pb.Run:
    return (await app.get_run(USER, pb.GetRunRequest(run_id=run_id))).run


async def _settle(harness: Harness, run_id: str) -> pb.Run:
    """Let the idle timers look at the (fake) clock, then read the run."""
    assert harness.engine is not None and harness.app is not None
    harness.engine.recheck_idle()
    for _ in range(50):
        await asyncio.sleep(0.005)
        run = await _get(harness.app, run_id)
        if run.state in (pb.RunState.DONE, pb.RunState.FAILED, pb.RunState.CANCELLED):
            return run
    return run


def _assert_idle_done(harness: Harness, run: pb.Run) -> None:
    assert run.state == pb.RunState.DONE and run.end_reason == "idle_timeout"
    states = harness.check_tape(run.run_id)
    assert states[-1] == "done"
    last = harness.members(run.run_id)[-1]
    assert isinstance(last, pb.RunStatus) and last.state == pb.RunState.DONE
    assert last.event == "complete" and last.reason == "idle_timeout"
    assert f"{IDLE_S} s" in last.message


async def test_idle_run_completes_after_the_timeout(harness: Harness) -> None:
    clock = _fake_clock(harness)
    app = await harness.start()
    run_id = await _open_run(app)
    clock[0] += (IDLE_S - 1) * 1000
    assert (await _settle(harness, run_id)).state == pb.RunState.IN_PROGRESS
    clock[0] += 1000
    run = await _settle(harness, run_id)
    _assert_idle_done(harness, run)
    assert run.final_text  # the conversation's answer is kept


async def test_new_input_resets_the_deadline(harness: Harness) -> None:
    clock = _fake_clock(harness)
    app = await harness.start()
    run_id = await _open_run(app)
    clock[0] += (IDLE_S - 600) * 1000
    await app.send_run_input(USER, pb.SendRunInputRequest(
        run_id=run_id, input=pb.MessageInput(text="and again"), wait=True))
    clock[0] += 1200 * 1000  # past the first deadline, not the new one
    assert (await _settle(harness, run_id)).state == pb.RunState.IN_PROGRESS
    clock[0] += (IDLE_S - 1200) * 1000
    _assert_idle_done(harness, await _settle(harness, run_id))


async def test_waiting_for_approval_is_not_reaped(harness: Harness) -> None:
    # The approval wait is governed by approval_timeout_s (here far longer).
    clock = _fake_clock(harness, approval_timeout_s=10 * IDLE_S)
    app = await harness.start()
    resolved = await app.resolve_session(USER, pb.ResolveSessionRequest(session_key="hitl"))
    await app.set_tool_posture(USER, pb.SetToolPostureRequest(
        session_id=resolved.session.session_id, tool_name="add",
        posture=pb.ToolPosture.ASK_EACH_TIME))
    created = await app.create_run(USER, pb.CreateRunRequest(
        session_key="hitl", input=pb.MessageInput(text=loop_text(1))))
    run_id = created.run.run_id
    approval = await next_approval(app, run_id)
    clock[0] += 2 * IDLE_S * 1000
    run = await _settle(harness, run_id)
    assert run.state == pb.RunState.WAITING_FOR_APPROVAL
    await app.decide_approval(USER, pb.DecideApprovalRequest(
        approval_id=approval.approval_id, decision=pb.ApprovalDecision.APPROVE,
        scope=pb.ApprovalScope.ONCE, reason="ok"))
    # The loop's end is fresh activity: the run is idle now, but not for long.
    assert harness.engine is not None
    await harness.engine.wait_run(identity_of(USER), run_id)
    run = await _settle(harness, run_id)
    assert run.state == pb.RunState.IN_PROGRESS and run.final_text == "result=1"
    clock[0] += IDLE_S * 1000
    _assert_idle_done(harness, await _settle(harness, run_id))


async def test_idle_deadline_survives_a_restart(harness: Harness) -> None:
    clock = _fake_clock(harness)
    app = await harness.start()
    past = await _open_run(app, session_key="past")
    clock[0] += 1800 * 1000
    later = await _open_run(app, session_key="later")  # idle since T0 + 1800 s
    await harness.restart()  # the restart itself is not activity
    clock[0] += 1801 * 1000  # `past` is over its deadline while the daemon is down
    await harness.restart()
    run = await _get(harness.app, past)  # type: ignore[arg-type]
    for _ in range(50):  # completed by recovery, no recheck needed
        if run.state == pb.RunState.DONE:
            break
        await asyncio.sleep(0.005)
        run = await _get(harness.app, past)  # type: ignore[arg-type]
    _assert_idle_done(harness, run)
    assert (await _settle(harness, later)).state == pb.RunState.IN_PROGRESS
    clock[0] += (IDLE_S - 1801) * 1000  # exactly IDLE_S after `later` went idle
    _assert_idle_done(harness, await _settle(harness, later))


async def test_zero_disables_the_policy(harness: Harness) -> None:
    clock = _fake_clock(harness, idle_s=0)
    app = await harness.start()
    run_id = await _open_run(app)
    clock[0] += 100 * IDLE_S * 1000
    assert (await _settle(harness, run_id)).state == pb.RunState.IN_PROGRESS
    await harness.restart()
    assert (await _settle(harness, run_id)).state == pb.RunState.IN_PROGRESS
    done = await harness.app.complete_run(  # type: ignore[union-attr]
        USER, pb.CompleteRunRequest(run_id=run_id, wait=True))
    assert done.run.state == pb.RunState.DONE and done.run.end_reason == "completed"


async def test_idle_timer_fires_on_the_real_clock(harness: Harness) -> None:
    # No fake clock and no recheck: the actor's own timer ends the run.
    harness.config = fast_config(idle_complete_s=0.2)
    app = await harness.start()
    run_id = await _open_run(app)
    assert harness.engine is not None
    async with asyncio.timeout(5.0):
        done = await harness.engine.wait_run(identity_of(USER), run_id, until_terminal=True)
    assert done.state == "done" and done.end_reason == "idle_timeout"
