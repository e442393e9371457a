"""How an approved call becomes durable: with its result if read-only, before it otherwise.

A call with side effects runs only once its decision (who decided, on which
call) and the approved row are committed, and its decider is answered then,
before the call runs. An approved read-only call runs first: its decision, the
approved row and its result with the attestation are one append (one record),
and its decider is answered as that lands. Both are observed from inside the
tool, by reading the real journal while the tool runs. Losing a decision
nobody was told of is what a crash may do (``test_a_stop_mid_call_loses_only
_an_unanswered_decision``; a SIGKILL of ``palyra serve``:
tests/daemon/test_decision_kill.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from engine_harness import ADMIN, USER, Harness, loop_text, next_approval, slow_add
from palyra_gen.palyra import v1 as pb

from palyra.app import PalyraApp
from palyra.core.errors import ErrorCode, PalyraError
from palyra.engine.model.records import APPROVALS, ApprovalRecord, decode
from palyra.engine.run.approvals import approval_key
from palyra.tools import Capability, ToolContext, ToolOutput, ToolSpec

APPROVE = pb.ApprovalDecision.APPROVE
READ_ONLY = frozenset({Capability.READ_ONLY})
SIDE_EFFECTS = frozenset({Capability.FILESYSTEM_WRITE})


class _AddArgs(msgspec.Struct, frozen=True):
    a: int | float
    b: int | float


async def _park(app: PalyraApp, key: str, k: int) -> str:
    resolved = await app.resolve_session(USER, pb.ResolveSessionRequest(session_key=key))
    await app.set_tool_posture(USER, pb.SetToolPostureRequest(
        session_id=resolved.session.session_id, tool_name="add",
        posture=pb.ToolPosture.ASK_EACH_TIME))
    created = await app.create_run(USER, pb.CreateRunRequest(
        session_key=key, input=pb.MessageInput(text=loop_text(k)), complete=True))
    return created.run.run_id


async def _decide(app: PalyraApp, approval_id: str) -> pb.Approval:
    response = await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=approval_id, decision=APPROVE, reason="ok"))
    return response.approval


def _journaled_add(harness: Harness, caps: frozenset[Capability],
                   seen: list[tuple[str, str]]) -> ToolSpec[_AddArgs]:
    """``add`` that records, as it runs, the newest approval row's state in the store and
    the decider of the newest approval response on the tape ("" when none is taped)."""

    async def handler(args: _AddArgs, ctx: ToolContext) -> ToolOutput:
        assert harness.store is not None
        tape = harness.store.read_tape(ctx.run_id, -1, 1000).events
        request = [e for e in tape if e.kind == "tape.tool_approval_request"][-1]
        responses = [e for e in tape if e.kind == "tape.tool_approval_response"
                     and e.payload["approvalId"] == request.payload["approvalId"]]
        raw = harness.store.get_entity(APPROVALS, approval_key(request.payload["approvalId"]))
        assert raw is not None
        seen.append((decode(ApprovalRecord, raw).state,
                     responses[0].payload["decidedBy"] if responses else ""))
        return ToolOutput({"result": args.a + args.b})

    return ToolSpec("add", "Add two numbers.", _AddArgs, caps, handler, timeout_s=10.0)


async def test_a_call_with_side_effects_runs_only_after_its_decision_is_durable(
        harness: Harness) -> None:
    seen: list[tuple[str, str]] = []
    harness.tool = _journaled_add(harness, SIDE_EFFECTS, seen)
    app = await harness.start()
    run_id = await _park(app, "side-effects", 2)
    for step in range(2):
        approval = await next_approval(app, run_id)
        decided = await _decide(app, approval.approval_id)
        assert decided.state == pb.ApprovalState.APPROVED
        # Answered once durable, before the approved call has run.
        assert len(seen) == step
    run = (await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))).run
    assert run.final_text == "result=2"
    assert seen == [("approved", "admin:ops")] * 2
    harness.check_tape(run_id)


async def test_a_read_only_call_lands_with_its_decision(harness: Harness) -> None:
    seen: list[tuple[str, str]] = []
    harness.tool = _journaled_add(harness, READ_ONLY, seen)
    app = await harness.start()
    run_id = await _park(app, "read-only", 2)
    for step in range(2):
        approval = await next_approval(app, run_id)
        decided = await _decide(app, approval.approval_id)
        assert decided.state == pb.ApprovalState.APPROVED
        # The call ran before its decision was durable ...
        assert seen[step] == ("pending", "")
        # ... and the decider is answered once both are: one record holds the
        # decision and the result.
        tape = harness.tape(run_id)
        [response] = [e for e in tape if e.kind == "tape.tool_approval_response"
                      and e.payload["approvalId"] == approval.approval_id]
        [result] = [e for e in tape if e.kind == "tape.tool_result"
                    and e.payload["proposalId"] == approval.proposal_id]
        # The events of one record share its global link (docs/journal/format.md).
        assert response.global_hash == result.global_hash
        assert response.payload["decidedBy"] == "admin:ops"
        assert harness.engine is not None
        row = harness.engine.approval_reader.get(approval.approval_id)
        assert row is not None and row.state == "approved"
    run = (await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))).run
    assert run.final_text == "result=2"
    harness.check_tape(run_id)


@pytest.mark.parametrize("scope", [pb.ApprovalScope.SESSION, pb.ApprovalScope.TIMEBOXED])
async def test_a_grant_is_durable_before_the_read_only_call_runs(
        harness: Harness, scope: pb.ApprovalScope) -> None:
    """A session or timeboxed grant writes the session row under the session's lock,
    which the call's run must not hold: its decision keeps a commit of its own."""
    seen: list[tuple[str, str]] = []
    harness.tool = _journaled_add(harness, READ_ONLY, seen)
    app = await harness.start()
    run_id = await _park(app, f"grant-{scope.name}", 1)
    approval = await next_approval(app, run_id)
    await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=approval.approval_id, decision=APPROVE, scope=scope,
        ttl_seconds=600 if scope == pb.ApprovalScope.TIMEBOXED else 0))
    run = (await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))).run
    assert run.final_text == "result=1"
    assert seen == [("approved", "admin:ops")]


async def test_a_stop_mid_call_loses_only_an_unanswered_decision(harness: Harness) -> None:
    """The daemon stops while an approved read-only call runs, before its decision and
    result land: the decider is told it was not recorded, the approval is still pending
    after the restart, and deciding it again finishes the run (the call runs again)."""
    harness.tool = slow_add(30.0, [Capability.READ_ONLY])
    # Stopped within the window in which the call may still share its decision's commit.
    harness.config = harness.config.__class__(approval_timeout_s=30, drain_grace_s=0.0,
                                              decision_ride_s=60.0)
    app = await harness.start()
    run_id = await _park(app, "stop", 1)
    approval = await next_approval(app, run_id)
    decider = asyncio.ensure_future(_decide(app, approval.approval_id))
    engine = harness.engine
    assert engine is not None
    async with asyncio.timeout(5.0):
        while True:  # the decision delivered, the approved call running
            if engine.phase_of(run_id) == "tool":
                break
            await asyncio.sleep(0.002)
    app = await harness.restart(tool=slow_add(0.0, [Capability.READ_ONLY]))
    with pytest.raises(PalyraError) as err:
        await decider
    assert err.value.code is ErrorCode.UNAVAILABLE
    assert not [e for e in harness.tape(run_id) if e.kind == "tape.tool_approval_response"]
    again = await next_approval(app, run_id)
    assert again.approval_id == approval.approval_id
    assert again.state == pb.ApprovalState.PENDING
    await _decide(app, approval.approval_id)
    run = (await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))).run
    assert run.state == pb.RunState.DONE and run.final_text == "result=1"
    harness.check_tape(run_id)


async def test_a_slow_read_only_call_does_not_hold_its_decider(harness: Harness) -> None:
    """Past ``decision_ride_s`` the decision is committed alone and its decider answered
    while the call still runs; the result lands after it, in a record of its own."""
    release = asyncio.Event()
    started: list[str] = []

    async def handler(args: _AddArgs, ctx: ToolContext) -> ToolOutput:
        started.append(ctx.run_id)
        await release.wait()
        return ToolOutput({"result": args.a + args.b})

    harness.tool = ToolSpec("add", "Add when released.", _AddArgs, READ_ONLY, handler,
                            timeout_s=30.0)
    app = await harness.start()
    run_id = await _park(app, "slow", 1)
    approval = await next_approval(app, run_id)
    async with asyncio.timeout(10.0):
        decided = await _decide(app, approval.approval_id)
    assert decided.state == pb.ApprovalState.APPROVED
    assert started == [run_id] and not release.is_set()  # answered mid-call
    assert [e for e in harness.tape(run_id) if e.kind == "tape.tool_approval_response"]
    assert not [e for e in harness.tape(run_id) if e.kind == "tape.tool_result"]
    release.set()
    run = (await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))).run
    assert run.final_text == "result=1"
    tape = harness.tape(run_id)
    [response] = [e for e in tape if e.kind == "tape.tool_approval_response"]
    [result] = [e for e in tape if e.kind == "tape.tool_result"]
    assert response.global_hash != result.global_hash
    harness.check_tape(run_id)


async def test_a_read_only_call_that_never_suspends_runs_in_the_runs_own_task(
        harness: Harness) -> None:
    """An approved call that finishes in its first step (``add``) is run by the resuming
    run itself: no task of its own, no timer for ``decision_ride_s`` (one task and a
    loop turn fewer per approved step). Only a call that suspends gets its task."""
    seen: list[tuple[str, str]] = []
    harness.tool = _journaled_add(harness, READ_ONLY, seen)
    app = await harness.start()
    run_id = await _park(app, "no-task", 2)
    loop = asyncio.get_running_loop()
    spawned: list[str] = []
    factory = loop.get_task_factory()

    def counting(lp: asyncio.AbstractEventLoop, coro: Any) -> asyncio.Future[Any]:
        spawned.append(getattr(coro, "__qualname__", ""))
        return factory(lp, coro) if factory is not None else asyncio.Task(coro, loop=lp)

    loop.set_task_factory(counting)
    try:
        for _ in range(2):
            approval = await next_approval(app, run_id)
            await _decide(app, approval.approval_id)
    finally:
        loop.set_task_factory(factory)
    assert [name for name in spawned if "tool" in name or "resumed" in name] == []
    assert seen == [("pending", "")] * 2
    run = (await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))).run
    assert run.final_text == "result=2"
    harness.check_tape(run_id)
