"""Human-in-the-loop approvals: decisions, scopes, cache, timeout, who may decide, export."""

from __future__ import annotations

import asyncio
import hashlib
import json

import msgspec
import pytest
from engine_harness import ADMIN, OTHER_USER, USER, Harness, fast_config, loop_text, next_approval
from palyra_gen.palyra import v1 as pb

from palyra.app import PalyraApp
from palyra.core.errors import ErrorCode, PalyraError

APPROVE, DENY = pb.ApprovalDecision.APPROVE, pb.ApprovalDecision.DENY


async def _hitl_run(app: PalyraApp, k: int, session_key: str = "hitl") -> str:
    resolved = await app.resolve_session(USER, pb.ResolveSessionRequest(session_key=session_key))
    await app.set_tool_posture(USER, pb.SetToolPostureRequest(
        session_id=resolved.session.session_id, tool_name="add",
        posture=pb.ToolPosture.ASK_EACH_TIME))
    created = await app.create_run(USER, pb.CreateRunRequest(
        session_key=session_key, input=pb.MessageInput(text=loop_text(k)), complete=True))
    return created.run.run_id


async def _decide(app: PalyraApp, approval_id: str, decision: pb.ApprovalDecision = APPROVE,
                  scope: pb.ApprovalScope = pb.ApprovalScope.ONCE, ttl: int = 0,
                  ctx: object = ADMIN) -> pb.Approval:
    response = await app.decide_approval(ctx, pb.DecideApprovalRequest(  # type: ignore[arg-type]
        approval_id=approval_id, decision=decision, scope=scope, ttl_seconds=ttl,
        reason="test"))
    return response.approval


async def _finish(app: PalyraApp, run_id: str) -> pb.Run:
    return (await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))).run


async def test_approve_each_step(harness: Harness) -> None:
    app = await harness.start()
    run_id = await _hitl_run(app, 3)
    for _ in range(3):
        approval = await next_approval(app, run_id)
        assert approval.tool_name == "add" and approval.state == pb.ApprovalState.PENDING
        assert len(approval.args_digest) == 64 and len(approval.policy_hash) == 64
        assert approval.requested_by.principal == "user:alice"
        decided = await _decide(app, approval.approval_id)
        assert decided.state == pb.ApprovalState.APPROVED
        assert decided.decided_by == "admin:ops" and decided.decided_at_unix_ms > 0
    run = await _finish(app, run_id)
    assert run.state == pb.RunState.DONE and run.final_text == "result=3"
    states = harness.check_tape(run_id)
    assert states.count("waiting_for_approval") == 3
    responses = [m for m in harness.members(run_id) if isinstance(m, pb.ToolApprovalResponse)]
    assert [r.approved for r in responses] == [True] * 3 and not any(r.from_cache
                                                                      for r in responses)


async def test_deny_is_fed_back_and_already_decided(harness: Harness) -> None:
    app = await harness.start()
    run_id = await _hitl_run(app, 2)
    approval = await next_approval(app, run_id)
    await _decide(app, approval.approval_id, DENY)
    with pytest.raises(PalyraError) as err:
        await _decide(app, approval.approval_id)
    assert err.value.code is ErrorCode.APPROVAL_ALREADY_DECIDED
    # The model saw the denial as a failed step (its total stays 0): one step left.
    second = await next_approval(app, run_id)
    await _decide(app, second.approval_id)
    run = await _finish(app, run_id)
    assert run.final_text == "result=1"
    results = [m for m in harness.members(run_id) if isinstance(m, pb.ToolResult)]
    assert not results[0].success and "denied" in results[0].error


async def test_only_owner_or_admin_may_decide(harness: Harness) -> None:
    app = await harness.start()
    run_id = await _hitl_run(app, 1)
    approval = await next_approval(app, run_id)
    with pytest.raises(PalyraError) as err:
        await _decide(app, approval.approval_id, ctx=OTHER_USER)
    assert err.value.code is ErrorCode.PERMISSION_DENIED
    await _decide(app, approval.approval_id, ctx=USER)  # the run's own user may
    assert (await _finish(app, run_id)).final_text == "result=1"


async def test_timeout_denies(harness: Harness) -> None:
    harness.config = fast_config(approval_timeout_s=0.2)
    app = await harness.start()
    run_id = await _hitl_run(app, 2)
    first = await next_approval(app, run_id)
    await asyncio.sleep(0.3)
    second = await next_approval(app, run_id)  # the timeout denial was a failed step
    assert second.approval_id != first.approval_id
    record = (await app.get_approval(ADMIN, pb.GetApprovalRequest(
        approval_id=first.approval_id))).approval
    assert record.state == pb.ApprovalState.TIMED_OUT and record.decided_by == "system:timeout"
    await _decide(app, second.approval_id)
    assert (await _finish(app, run_id)).final_text == "result=1"


async def test_session_scope_is_reused_and_reset_clears_it(harness: Harness) -> None:
    app = await harness.start()
    run_id = await _hitl_run(app, 3, "sess")
    # Each step has different args (a=r), so a session grant for step 0 does not
    # cover step 1; run the same K again to hit the cached grants.
    for _ in range(3):
        approval = await next_approval(app, run_id)
        await _decide(app, approval.approval_id, scope=pb.ApprovalScope.SESSION)
    await _finish(app, run_id)
    again = await app.create_run(USER, pb.CreateRunRequest(
        session_key="sess", input=pb.MessageInput(text=loop_text(3)), complete=True))
    run = await _finish(app, again.run.run_id)
    assert run.final_text == "result=3"
    cached = [m for m in harness.members(run.run_id) if isinstance(m, pb.ToolApprovalResponse)]
    assert len(cached) == 3 and all(c.from_cache and c.approved for c in cached)
    # Reset forgets every cached decision.
    await app.resolve_session(USER, pb.ResolveSessionRequest(session_key="sess",
                                                             reset_session=True))
    third = await app.create_run(USER, pb.CreateRunRequest(
        session_key="sess", input=pb.MessageInput(text=loop_text(1)), complete=True))
    approval = await next_approval(app, third.run.run_id)
    await _decide(app, approval.approval_id)
    assert (await _finish(app, third.run.run_id)).final_text == "result=1"


async def test_timeboxed_scope_until_ttl_then_ask_again(harness: Harness) -> None:
    clock = [1_700_000_000_000]
    harness.now_ms = lambda: clock[0]
    app = await harness.start()
    with pytest.raises(PalyraError) as err:
        run_id = await _hitl_run(app, 1, "tb")
        approval = await next_approval(app, run_id)
        await _decide(app, approval.approval_id, scope=pb.ApprovalScope.TIMEBOXED, ttl=0)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    await _decide(app, approval.approval_id, scope=pb.ApprovalScope.TIMEBOXED, ttl=60)
    await _finish(app, run_id)
    clock[0] += 30_000  # inside the box: answered from the cache
    second = await app.create_run(USER, pb.CreateRunRequest(
        session_key="tb", input=pb.MessageInput(text=loop_text(1)), complete=True))
    assert (await _finish(app, second.run.run_id)).final_text == "result=1"
    assert any(isinstance(m, pb.ToolApprovalResponse) and m.from_cache
               for m in harness.members(second.run.run_id))
    clock[0] += 31_000  # past the TTL: ask again, and the old grant is expired
    third = await app.create_run(USER, pb.CreateRunRequest(
        session_key="tb", input=pb.MessageInput(text=loop_text(1)), complete=True))
    fresh = await next_approval(app, third.run.run_id)
    assert fresh.approval_id != approval.approval_id
    old = (await app.get_approval(ADMIN, pb.GetApprovalRequest(
        approval_id=approval.approval_id))).approval
    assert old.state == pb.ApprovalState.EXPIRED
    await _decide(app, fresh.approval_id)
    assert (await _finish(app, third.run.run_id)).final_text == "result=1"


async def test_inline_approval_on_the_stream(harness: Harness) -> None:
    app = await harness.start()
    resolved = await app.resolve_session(USER, pb.ResolveSessionRequest(session_key="inline"))
    await app.set_tool_posture(USER, pb.SetToolPostureRequest(
        session_id=resolved.session.session_id, tool_name="add",
        posture=pb.ToolPosture.ASK_EACH_TIME))
    outbox: asyncio.Queue[pb.RunStreamRequest | None] = asyncio.Queue()

    async def requests():  # type: ignore[no-untyped-def]
        yield pb.RunStreamRequest(v=1, session_key="inline",
                                  input=pb.MessageInput(text=loop_text(2)))
        while (item := await outbox.get()) is not None:
            yield item

    seen = []
    async for response in app.run_stream(USER, requests()):
        event = response.event
        seen.append(event)
        if event.tool_approval_request:
            await outbox.put(pb.RunStreamRequest(v=1, approval=pb.InlineApprovalDecision(
                approval_id=event.tool_approval_request.approval_id, decision=APPROVE)))
        if event.message_replied:
            await outbox.put(None)
    assert seen[-1].status.state == pb.RunState.DONE
    assert [e.message_replied.reply_text for e in seen if e.message_replied] == ["result=2"]


async def test_export_approvals_chained_checksum(harness: Harness) -> None:
    app = await harness.start()
    run_id = await _hitl_run(app, 2)
    for _ in range(2):
        await _decide(app, (await next_approval(app, run_id)).approval_id)
    await _finish(app, run_id)
    listed = await app.list_approvals(ADMIN, pb.ListApprovalsRequest(run_id=run_id))
    assert len(listed.approvals) == 2
    chunks = [c async for c in app.export_approvals(ADMIN, pb.ExportApprovalsRequest())]
    assert [c.chunk_seq for c in chunks] == list(range(1, len(chunks) + 1)) and chunks[-1].done
    lines = [json.loads(x) for x in b"".join(c.chunk for c in chunks).splitlines()]
    prev = "0" * 64
    for seq, line in enumerate(lines[:-1], start=1):
        inner = hashlib.sha256(msgspec.json.encode(line["record"], order="sorted")).hexdigest()
        expect = hashlib.sha256(
            f"{line['schema']}\n{seq}\n{prev}\n{inner}".encode()).hexdigest()
        assert line["seq"] == seq and line["prev"] == prev and line["checksum"] == expect
        prev = expect
    assert lines[-1]["type"] == "trailer" and lines[-1]["count"] == 2
    assert lines[-1]["final_checksum"] == prev
