"""Cancellation (within 100 ms), drain, and recovery after a restart."""

from __future__ import annotations

import asyncio
import time

import pytest
from engine_harness import ADMIN, USER, Harness, loop_text, next_approval, slow_add
from palyra_gen.palyra import v1 as pb

from palyra.core.errors import ErrorCode, PalyraError
from palyra.policy import PolicyConfig, Posture
from palyra.providers import ScriptedProvider
from palyra.tools import Capability

CANCEL_BOUND_S = 0.1


async def _wait_phase(harness: Harness, run_id: str, phase: str) -> None:
    async with asyncio.timeout(5):
        while True:
            if harness.engine.phase_of(run_id) == phase:  # type: ignore[union-attr]
                return
            await asyncio.sleep(0.002)


async def _abort_and_time(harness: Harness, run_id: str) -> float:
    app = harness.app
    assert app is not None
    started = time.monotonic()
    response = await app.abort_run(USER, pb.AbortRunRequest(run_id=run_id))
    elapsed = time.monotonic() - started
    assert response.cancel_requested and response.state == pb.RunState.CANCELLED
    return elapsed


async def test_abort_during_provider_call(harness: Harness) -> None:
    harness.provider_factory = lambda: ScriptedProvider(delay_s=10)
    app = await harness.start()
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text="slow answer"), complete=True))
    run_id = created.run.run_id
    await _wait_phase(harness, run_id, "model")
    assert await _abort_and_time(harness, run_id) < CANCEL_BOUND_S
    members = harness.members(run_id)
    assert members[-1].state == pb.RunState.CANCELLED
    assert members[-1].reason == "cancelled_by_request"
    assert not any(isinstance(m, pb.RunStatus) and m.state == pb.RunState.DONE for m in members)
    harness.check_tape(run_id)


async def test_abort_during_tool(harness: Harness) -> None:
    harness.tool = slow_add(10)
    app = await harness.start()
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text=loop_text(3)), complete=True))
    await _wait_phase(harness, created.run.run_id, "tool")
    assert await _abort_and_time(harness, created.run.run_id) < CANCEL_BOUND_S
    run = (await app.get_run(USER, pb.GetRunRequest(run_id=created.run.run_id))).run
    assert run.state == pb.RunState.CANCELLED and run.end_reason == "cancelled_by_request"
    harness.check_tape(run.run_id)


async def test_cancel_command_and_pending_approval_is_cancelled(harness: Harness) -> None:
    app = await harness.start()
    resolved = await app.resolve_session(USER, pb.ResolveSessionRequest(session_key="c"))
    await app.set_tool_posture(USER, pb.SetToolPostureRequest(
        session_id=resolved.session.session_id, tool_name="add",
        posture=pb.ToolPosture.ASK_EACH_TIME))
    created = await app.create_run(USER, pb.CreateRunRequest(
        session_key="c", input=pb.MessageInput(text=loop_text(2))))
    approval = await next_approval(app, created.run.run_id)
    await app.send_run_input(USER, pb.SendRunInputRequest(
        run_id=created.run.run_id, input=pb.MessageInput(text="/cancel")))
    run = (await app.get_run(USER, pb.GetRunRequest(run_id=created.run.run_id))).run
    assert run.state == pb.RunState.CANCELLED
    record = (await app.get_approval(ADMIN, pb.GetApprovalRequest(
        approval_id=approval.approval_id))).approval
    assert record.state == pb.ApprovalState.CANCELLED
    with pytest.raises(PalyraError) as err:
        await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
            approval_id=approval.approval_id, decision=pb.ApprovalDecision.APPROVE))
    assert err.value.code is ErrorCode.APPROVAL_ALREADY_DECIDED


async def test_approval_decided_after_restart_finishes_the_run(harness: Harness) -> None:
    app = await harness.start()
    resolved = await app.resolve_session(USER, pb.ResolveSessionRequest(session_key="r"))
    await app.set_tool_posture(USER, pb.SetToolPostureRequest(
        session_id=resolved.session.session_id, tool_name="add",
        posture=pb.ToolPosture.ASK_EACH_TIME))
    # A RunStream-driven run: its stream dies with the daemon.
    async def requests():  # type: ignore[no-untyped-def]
        yield pb.RunStreamRequest(v=1, session_key="r",
                                  input=pb.MessageInput(text=loop_text(3)))
        await asyncio.Event().wait()

    stream = app.run_stream(USER, requests())
    run_id = ""
    async for response in stream:
        run_id = response.event.run_id
        if response.event.tool_approval_request:
            break
    await stream.aclose()
    approval = await next_approval(app, run_id)
    await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=approval.approval_id, decision=pb.ApprovalDecision.APPROVE))
    second = await next_approval(app, run_id)
    app = await harness.restart()  # close the journal, reopen, recover
    pending = await app.get_run(USER, pb.GetRunRequest(run_id=run_id))
    assert pending.run.state == pb.RunState.WAITING_FOR_APPROVAL
    assert pending.run.pending_approval_id == second.approval_id
    for _ in range(2):
        current = await next_approval(app, run_id)
        await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
            approval_id=current.approval_id, decision=pb.ApprovalDecision.APPROVE))
    done = await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))
    assert done.run.state == pb.RunState.DONE and done.run.final_text == "result=3"
    harness.check_tape(run_id)


@pytest.mark.parametrize("read_only", [True, False])
async def test_tool_in_flight_at_shutdown(harness: Harness, read_only: bool) -> None:
    caps = [Capability.READ_ONLY] if read_only else [Capability.FILESYSTEM_WRITE]
    harness.tool = slow_add(0.5, caps)
    harness.config = harness.config.__class__(approval_timeout_s=30, drain_grace_s=0.0)
    harness.policy_config = PolicyConfig(tool_postures={"add": Posture.ALWAYS_ALLOW})
    app = await harness.start()
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text=loop_text(2)), complete=True))
    run_id = created.run.run_id
    await _wait_phase(harness, run_id, "tool")
    app = await harness.restart(tool=slow_add(0.01, caps))
    run = (await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))).run
    if read_only:
        assert run.state == pb.RunState.DONE and run.final_text == "result=2"
    else:
        assert run.state == pb.RunState.FAILED and run.end_reason == "daemon_restarted"
    harness.check_tape(run_id)


async def test_drain_parks_a_provider_call_and_recovery_resumes(harness: Harness) -> None:
    harness.provider_factory = lambda: ScriptedProvider(delay_s=10)
    app = await harness.start()
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text=loop_text(2)), complete=True))
    await _wait_phase(harness, created.run.run_id, "model")
    app = await harness.restart(provider_factory=ScriptedProvider)
    run = (await app.complete_run(USER, pb.CompleteRunRequest(run_id=created.run.run_id,
                                                              wait=True))).run
    assert run.state == pb.RunState.DONE and run.final_text == "result=2"
    harness.check_tape(run.run_id)
