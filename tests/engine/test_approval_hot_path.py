"""The approval hot path: a parked run's approval is held as committed, not re-read.

``PendingApprovals`` answers the decider and the resuming run from memory; these
tests hold it to its rules on a real journal: the entry *is* the committed row,
it leaves before the row changes (decision, cancel) and when the run stops, and
after a restart the store answers. Also: the clean-string memo behind record
redaction changes no result and keeps no secret.
"""

from __future__ import annotations

import asyncio

import pytest
from engine_harness import ADMIN, USER, Harness, loop_text, next_approval
from hypothesis import given, settings
from hypothesis import strategies as st
from palyra_gen.palyra import v1 as pb

from palyra.app import PalyraApp
from palyra.core.errors import ErrorCode, PalyraError
from palyra.core.redaction import redact
from palyra.engine.model import records
from palyra.engine.run.approvals import PendingApprovals

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
