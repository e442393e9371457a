"""The approval hot path: a parked run's approval is held as committed, not re-read.

``PendingApprovals`` answers the decider and the resuming run from memory; these
tests hold it to its rules on a real journal: the entry *is* the committed row,
it leaves before the row changes (decision, cancel) and when the run stops, and
after a restart the store answers. Also: the clean-string memo behind record
redaction changes no result and keeps no secret.
"""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from engine_harness import ADMIN, USER, Harness, loop_text, next_approval
from hypothesis import given, settings
from hypothesis import strategies as st
from palyra_gen.palyra import v1 as pb

from palyra.app import PalyraApp
from palyra.core.errors import ErrorCode, PalyraError
from palyra.core.redaction import redact
from palyra.engine.model import records
from palyra.engine.model.records import APPROVALS, ApprovalRecord, decode
from palyra.engine.run.approvals import PendingApprovals, approval_key
from palyra.tools import Capability, ToolContext, ToolOutput, ToolSpec

APPROVE = pb.ApprovalDecision.APPROVE


def _pending(harness: Harness) -> PendingApprovals:
    assert harness.engine is not None
    return harness.engine._deps.pending


async def _park(app: PalyraApp, key: str, k: int, *, complete: bool = True) -> str:
    resolved = await app.resolve_session(USER, pb.ResolveSessionRequest(session_key=key))
    await app.set_tool_posture(USER, pb.SetToolPostureRequest(
        session_id=resolved.session.session_id, tool_name="add",
        posture=pb.ToolPosture.ASK_EACH_TIME))
    created = await app.create_run(USER, pb.CreateRunRequest(
        session_key=key, input=pb.MessageInput(text=loop_text(k)), complete=complete))
    return created.run.run_id


async def _decide(app: PalyraApp, approval_id: str) -> pb.Approval:
    response = await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=approval_id, decision=APPROVE, reason="ok"))
    return response.approval


async def test_the_held_approval_is_the_committed_row(harness: Harness) -> None:
    app = await harness.start()
    run_id = await _park(app, "held", 2)
    assert harness.engine is not None
    for _ in range(2):
        approval = await next_approval(app, run_id)
        held = _pending(harness).get(approval.approval_id)
        assert held is not None
        assert held == harness.engine.approval_reader.get(approval.approval_id)
        decided = await _decide(app, approval.approval_id)
        assert decided.state == pb.ApprovalState.APPROVED and decided.decided_by == "admin:ops"
        # Its row changed: the store is the only answer now, and it says approved.
        assert _pending(harness).get(approval.approval_id) is None
        row = harness.engine.approval_reader.get(approval.approval_id)
        assert row is not None and row.state == "approved" and row.decided_by == "admin:ops"
        with pytest.raises(PalyraError) as err:
            await _decide(app, approval.approval_id)
        assert err.value.code is ErrorCode.APPROVAL_ALREADY_DECIDED
    run = (await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))).run
    assert run.state == pb.RunState.DONE and run.final_text == "result=2"
    assert len(_pending(harness)) == 0
    harness.check_tape(run_id)


async def test_a_cancelled_run_leaves_nothing_held(harness: Harness) -> None:
    app = await harness.start()
    run_id = await _park(app, "cancel", 2, complete=False)
    approval = await next_approval(app, run_id)
    assert _pending(harness).get(approval.approval_id) is not None
    await app.send_run_input(USER, pb.SendRunInputRequest(
        run_id=run_id, input=pb.MessageInput(text="/cancel")))
    assert len(_pending(harness)) == 0
    with pytest.raises(PalyraError) as err:
        await _decide(app, approval.approval_id)
    assert err.value.code is ErrorCode.APPROVAL_ALREADY_DECIDED


async def test_a_parked_run_leaves_nothing_held_and_restart_reads_the_store(
        harness: Harness) -> None:
    app = await harness.start()
    run_id = await _park(app, "restart", 2)
    first = await next_approval(app, run_id)
    await _decide(app, first.approval_id)
    second = await next_approval(app, run_id)
    before = _pending(harness)
    assert before.get(second.approval_id) is not None
    app = await harness.restart()
    assert len(before) == 0  # the drained run's mailbox closed
    # Decided at once after recovery: the store answers (the resumed run may not
    # be waiting yet; the mailbox keeps the decision for it).
    decided = await _decide(app, second.approval_id)
    assert decided.state == pb.ApprovalState.APPROVED
    run = (await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))).run
    assert run.state == pb.RunState.DONE and run.final_text == "result=2"
    assert len(_pending(harness)) == 0
    harness.check_tape(run_id)


async def test_the_resumed_run_holds_its_approval_again(harness: Harness) -> None:
    app = await harness.start()
    run_id = await _park(app, "again", 1)
    approval = await next_approval(app, run_id)
    app = await harness.restart()
    assert harness.engine is not None
    for _ in range(1000):  # the resumed run reaches its wait soon after recovery
        if _pending(harness).get(approval.approval_id) is not None:
            break
        await asyncio.sleep(0.005)
    assert _pending(harness).get(approval.approval_id) == \
        harness.engine.approval_reader.get(approval.approval_id)
    await _decide(app, approval.approval_id)
    run = (await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))).run
    assert run.final_text == "result=1"


class _AddArgs(msgspec.Struct, frozen=True):
    a: int | float
    b: int | float


async def test_an_approved_call_runs_only_after_its_decision_is_durable(
        harness: Harness) -> None:
    """From inside the tool, on the real journal: the decision (who, on which call) and
    the approved row are committed before the tool runs, even for a read-only tool."""
    seen: list[tuple[str, str, str]] = []

    async def handler(args: _AddArgs, ctx: ToolContext) -> ToolOutput:
        assert harness.store is not None
        tape = harness.store.read_tape(ctx.run_id, -1, 1000).events
        response = [e for e in tape if e.kind == "tape.tool_approval_response"][-1]
        raw = harness.store.get_entity(APPROVALS, approval_key(response.payload["approvalId"]))
        assert raw is not None
        row = decode(ApprovalRecord, raw)
        seen.append((response.payload["decidedBy"], row.state, row.args_digest))
        return ToolOutput({"result": args.a + args.b})

    harness.tool = ToolSpec("add", "Add two numbers.", _AddArgs,
                            frozenset({Capability.READ_ONLY}), handler, timeout_s=10.0)
    app = await harness.start()
    run_id = await _park(app, "durable", 2)
    digests = []
    for _ in range(2):
        approval = await next_approval(app, run_id)
        digests.append(approval.args_digest)
        await _decide(app, approval.approval_id)
    run = (await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))).run
    assert run.final_text == "result=2"
    assert seen == [("admin:ops", "approved", digest) for digest in digests]


_SECRETISH = st.sampled_from([
    "", "hello", "sk-abcdefghijklmnopqrstuvwxyz0123456789", '{"api_key":"abc123"}',
    '{"a":1,"b":2}', "password=hunter2", "Bearer eyJhbGciOiJIUzI1NiJ9.e30.abc", "<redacted>",
    '{"token":"<redacted>"}', "--api-key sk-live-0000000000000000"])


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.one_of(_SECRETISH, st.text(max_size=40)), max_size=20))
def test_redact_str_memo_changes_no_answer_and_keeps_no_secret(texts: list[str]) -> None:
    for text in [*texts, *texts]:  # twice: the second pass answers from the memo
        value = redact(text).value
        assert records.redact_str(text) == (value if isinstance(value, str) else text)
    assert all(redact(clean).value == clean for clean in records._CLEAN)


def test_redact_str_memo_is_bounded() -> None:
    for i in range(records._CLEAN_MAX_ENTRIES + 50):
        records.redact_str(f"plain text number {i}")
    records.redact_str("x" * (records._CLEAN_MAX_CHARS + 1))
    assert len(records._CLEAN) <= records._CLEAN_MAX_ENTRIES
    assert "x" * (records._CLEAN_MAX_CHARS + 1) not in records._CLEAN


async def test_the_decider_is_answered_before_the_run_goes_on(harness: Harness) -> None:
    """A decision is acknowledged as soon as it is durable: the decider does not wait
    behind the approved call (which runs without suspending) and its result's commit."""
    ran: list[int] = []

    async def handler(args: _AddArgs, ctx: ToolContext) -> ToolOutput:
        ran.append(args.a + args.b)
        return ToolOutput({"result": args.a + args.b})

    harness.tool = ToolSpec("add", "Add two numbers.", _AddArgs,
                            frozenset({Capability.READ_ONLY}), handler, timeout_s=10.0)
    app = await harness.start()
    run_id = await _park(app, "answered", 2)
    for step in range(2):
        approval = await next_approval(app, run_id)
        decided = await _decide(app, approval.approval_id)
        assert decided.state == pb.ApprovalState.APPROVED
        # Durable, yet the run has not taken its next step: the approved call has not run.
        assert len(ran) == step
        row = harness.engine.approval_reader.get(approval.approval_id) if harness.engine else None
        assert row is not None and row.state == "approved"
    run = (await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))).run
    assert run.final_text == "result=2" and len(ran) == 2
