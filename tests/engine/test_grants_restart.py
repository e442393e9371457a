"""Cached approval grants are durable: they answer after a daemon restart.

A session grant and a timeboxed grant live in the session record (REFERENCE
Part B 5; the reference keeps its cache in memory only). After close + reopen
the same call with the same arguments in that session is answered from the
cache (``tool_approval_response{from_cache}``), and the timeboxed grant still
expires on the (fake) clock once its TTL is over.
"""

from __future__ import annotations

from engine_harness import ADMIN, USER, Harness, loop_text, next_approval
from palyra_gen.palyra import v1 as pb

from palyra.app import PalyraApp

KEY = "grants"
T0 = 1_700_000_000_000
TTL_S = 60


async def _run(app: PalyraApp, k: int) -> str:
    created = await app.create_run(USER, pb.CreateRunRequest(
        session_key=KEY, input=pb.MessageInput(text=loop_text(k)), complete=True))
    return created.run.run_id


async def _decide(app: PalyraApp, approval_id: str, scope: pb.ApprovalScope,
                  ttl: int = 0) -> None:
    await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=approval_id, decision=pb.ApprovalDecision.APPROVE, scope=scope,
        ttl_seconds=ttl, reason="test"))


async def _finish(app: PalyraApp, run_id: str) -> pb.Run:
    return (await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))).run


def _responses(harness: Harness, run_id: str) -> list[pb.ToolApprovalResponse]:
    return [m for m in harness.members(run_id) if isinstance(m, pb.ToolApprovalResponse)]


async def test_session_and_timeboxed_grants_survive_a_restart(harness: Harness) -> None:
    clock = [T0]
    harness.now_ms = lambda: clock[0]
    app = await harness.start()
    session = (await app.resolve_session(USER, pb.ResolveSessionRequest(session_key=KEY))).session
    await app.set_tool_posture(USER, pb.SetToolPostureRequest(
        session_id=session.session_id, tool_name="add", posture=pb.ToolPosture.ASK_EACH_TIME))

    # Step 1 of the loop is add{a:0,b:1}: granted for the session.
    first = await _run(app, 1)
    await _decide(app, (await next_approval(app, first)).approval_id, pb.ApprovalScope.SESSION)
    assert (await _finish(app, first)).final_text == "result=1"
    # K=2: step 1 comes from the session grant, step 2 (add{a:1,b:1}) is boxed.
    second = await _run(app, 2)
    boxed = await next_approval(app, second)
    await _decide(app, boxed.approval_id, pb.ApprovalScope.TIMEBOXED, TTL_S)
    assert (await _finish(app, second)).final_text == "result=2"

    app = await harness.restart()  # close the journal, reopen, recover
    clock[0] += (TTL_S - 10) * 1000  # still inside the box
    third = await _run(app, 2)
    run = await _finish(app, third)
    assert run.state == pb.RunState.DONE and run.final_text == "result=2"
    cached = _responses(harness, third)
    assert [(r.from_cache, r.approved, r.scope) for r in cached] == [
        (True, True, pb.ApprovalScope.SESSION), (True, True, pb.ApprovalScope.TIMEBOXED)]
    assert cached[1].approval_id == boxed.approval_id and cached[1].ttl_seconds == 10
    assert all(r.decided_by == "admin:ops" for r in cached)

    app = await harness.restart()
    clock[0] += 11_000  # past the TTL: the session grant answers, the boxed one asks again
    fourth = await _run(app, 2)
    fresh = await next_approval(app, fourth)
    assert fresh.approval_id != boxed.approval_id
    old = (await app.get_approval(ADMIN, pb.GetApprovalRequest(
        approval_id=boxed.approval_id))).approval
    assert old.state == pb.ApprovalState.EXPIRED
    await _decide(app, fresh.approval_id, pb.ApprovalScope.ONCE)
    assert (await _finish(app, fourth)).final_text == "result=2"
    responses = _responses(harness, fourth)
    assert [r.from_cache for r in responses] == [True, False]
    harness.check_tape(fourth)
