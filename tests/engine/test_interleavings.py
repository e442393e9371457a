"""Random interleavings of inputs, approvals, aborts, completions and restarts.

Whatever the order, no run makes an illegal transition, loses or duplicates a
tape event (tape_seq dense from 0, each event journaled once), and every run
ends in a terminal state once the client completes it and approves what is
pending; the journal verifies throughout.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from engine_harness import ADMIN, USER, Harness, loop_text
from hypothesis import given, settings
from hypothesis import strategies as st
from palyra_gen.palyra import v1 as pb

from palyra.app import PalyraApp
from palyra.core.errors import ErrorCode, PalyraError

TOLERATED = {ErrorCode.RUN_TERMINAL, ErrorCode.APPROVAL_ALREADY_DECIDED,
             ErrorCode.UNAVAILABLE}
TERMINAL = (pb.RunState.DONE, pb.RunState.FAILED, pb.RunState.CANCELLED)

run_ix = st.integers(0, 7)
op = st.one_of(
    st.tuples(st.just("start"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("input"), run_ix, st.integers(0, 2)),
    st.tuples(st.just("decide"), run_ix, st.sampled_from(["approve", "deny", "session"])),
    st.tuples(st.just("abort"), run_ix),
    st.tuples(st.just("complete"), run_ix),
    st.tuples(st.just("restart")),
    st.tuples(st.just("settle")),
)


async def _pending(app: PalyraApp, run_id: str) -> str:
    run = (await app.get_run(USER, pb.GetRunRequest(run_id=run_id))).run
    return run.pending_approval_id if run.state == pb.RunState.WAITING_FOR_APPROVAL else ""


async def _step(h: Harness, app: PalyraApp, runs: list[str], step: tuple) -> PalyraApp:  # type: ignore[type-arg]
    kind = step[0]
    if kind == "restart":
        return await h.restart()
    if kind == "settle":
        await asyncio.sleep(0.01)
        return app
    if kind == "start":
        _, k, hitl = step
        created = await app.create_run(USER, pb.CreateRunRequest(
            session_key="hitl" if hitl else "plain", input=pb.MessageInput(text=loop_text(k))))
        runs.append(created.run.run_id)
        return app
    if not runs:
        return app
    run_id = runs[step[1] % len(runs)]
    try:
        if kind == "input":
            await app.send_run_input(USER, pb.SendRunInputRequest(
                run_id=run_id, input=pb.MessageInput(text=loop_text(step[2]))))
        elif kind == "decide":
            approval_id = await _pending(app, run_id)
            if approval_id:
                scope = (pb.ApprovalScope.SESSION if step[2] == "session"
                         else pb.ApprovalScope.ONCE)
                decision = (pb.ApprovalDecision.DENY if step[2] == "deny"
                            else pb.ApprovalDecision.APPROVE)
                await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
                    approval_id=approval_id, decision=decision, scope=scope))
        elif kind == "abort":
            await app.abort_run(USER, pb.AbortRunRequest(run_id=run_id))
        elif kind == "complete":
            await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id))
    except PalyraError as exc:
        assert exc.code in TOLERATED, exc
    return app


async def _drain_to_terminal(app: PalyraApp, run_id: str) -> pb.Run:
    async with asyncio.timeout(10):
        while True:
            try:
                run = (await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id))).run
            except PalyraError as exc:
                assert exc.code in TOLERATED, exc
                run = (await app.get_run(USER, pb.GetRunRequest(run_id=run_id))).run
            if run.state in TERMINAL:
                return run
            approval_id = await _pending(app, run_id)
            if approval_id:
                try:
                    await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
                        approval_id=approval_id, decision=pb.ApprovalDecision.APPROVE))
                except PalyraError as exc:
                    assert exc.code in TOLERATED, exc
            await asyncio.sleep(0.005)


async def _scenario(steps: list[tuple]) -> None:  # type: ignore[type-arg]
    with tempfile.TemporaryDirectory() as tmp:
        h = Harness(Path(tmp) / "data")
        app = await h.start()
        try:
            hitl = await app.resolve_session(USER, pb.ResolveSessionRequest(session_key="hitl"))
            await app.set_tool_posture(USER, pb.SetToolPostureRequest(
                session_id=hitl.session.session_id, tool_name="add",
                posture=pb.ToolPosture.ASK_EACH_TIME))
            runs: list[str] = []
            for step in steps:
                app = await _step(h, app, runs, step)
            for run_id in runs:
                h.check_tape(run_id)
            for run_id in runs:
                run = await _drain_to_terminal(app, run_id)
                states = h.check_tape(run_id)
                assert states[-1] == run.state.name.lower()
                assert run.tape_len == len(h.tape(run_id))
            verify = await app.verify_journal(ADMIN, pb.VerifyJournalRequest())
            assert verify.ok, verify.reason
        finally:
            await h.stop()


@settings(max_examples=25, deadline=None)
@given(st.lists(op, min_size=3, max_size=20))
def test_random_interleavings_keep_tapes_legal(steps: list[tuple]) -> None:  # type: ignore[type-arg]
    asyncio.run(_scenario(steps))
