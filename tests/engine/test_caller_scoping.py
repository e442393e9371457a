"""Caller scoping of approvals and the journal (``palyra.app._access``).

Operators (``admin:*``, ``system:*``) see every approval and may verify,
export and checkpoint the journal; any other principal sees only the
approvals of its own runs and may read only the journal head.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from engine_harness import ADMIN, DEVICE, OTHER_USER, USER, Harness, loop_text
from palyra_gen.palyra import v1 as pb

from palyra.app import CallContext, PalyraApp
from palyra.app._access import is_operator
from palyra.core.errors import ErrorCode, PalyraError
from palyra.engine import IdentityRec, may_access
from palyra.journal import verify_store

SYSTEM = CallContext.for_principal("system:scheduler", DEVICE)


async def _waiting_approval(app: PalyraApp, ctx: CallContext, key: str) -> pb.Approval:
    """Start an ask-each-time run as ``ctx`` and return its pending approval."""
    session = (await app.resolve_session(ctx, pb.ResolveSessionRequest(session_key=key))).session
    await app.set_tool_posture(ctx, pb.SetToolPostureRequest(
        session_id=session.session_id, tool_name="add", posture=pb.ToolPosture.ASK_EACH_TIME))
    created = await app.create_run(ctx, pb.CreateRunRequest(
        session_id=session.session_id, input=pb.MessageInput(text=loop_text(1)), complete=True))
    async with asyncio.timeout(5.0):
        while True:
            run = (await app.get_run(ctx, pb.GetRunRequest(run_id=created.run.run_id))).run
            if run.pending_approval_id:
                return (await app.get_approval(ctx, pb.GetApprovalRequest(
                    approval_id=run.pending_approval_id))).approval
            await asyncio.sleep(0.005)


async def _export_approval_ids(app: PalyraApp, ctx: CallContext) -> list[str]:
    chunks = [c async for c in app.export_approvals(ctx, pb.ExportApprovalsRequest())]
    lines = [json.loads(x) for x in b"".join(c.chunk for c in chunks).splitlines()]
    return [line["record"]["approvalId"] for line in lines if line["type"] == "record"]


@pytest.mark.parametrize(("principal", "operator"), [
    ("admin:ops", True), ("system:timeout", True), ("user:admin", False),
    ("administrator", False), ("admin", False), ("", False), ("channel:discord", False),
])
def test_is_operator(principal: str, operator: bool) -> None:
    assert is_operator(principal) is operator
    # The same rule as the engine's for runs: an operator may access anyone's.
    assert may_access(IdentityRec(principal), IdentityRec("user:someone-else")) is operator


async def test_approvals_are_scoped_to_the_runs_requester(harness: Harness) -> None:
    app = await harness.start()
    alices = await _waiting_approval(app, USER, "alice")
    mallorys = await _waiting_approval(app, OTHER_USER, "mallory")
    assert alices.requested_by.principal == "user:alice"

    for ctx, expect in ((USER, [alices]), (OTHER_USER, [mallorys]),
                        (ADMIN, [alices, mallorys]), (SYSTEM, [alices, mallorys])):
        listed = await app.list_approvals(ctx, pb.ListApprovalsRequest())
        ids = [a.approval_id for a in expect]
        assert [a.approval_id for a in listed.approvals] == ids, ctx
        assert await _export_approval_ids(app, ctx) == ids, ctx

    # Filters never widen the scope: asking for alice's run by id shows mallory nothing.
    assert not (await app.list_approvals(OTHER_USER, pb.ListApprovalsRequest(
        run_id=alices.run_id))).approvals
    got = await app.get_approval(USER, pb.GetApprovalRequest(approval_id=alices.approval_id))
    assert got.approval.args_json == alices.args_json
    with pytest.raises(PalyraError) as err:
        await app.get_approval(OTHER_USER, pb.GetApprovalRequest(
            approval_id=alices.approval_id))
    assert err.value.code is ErrorCode.NOT_FOUND  # indistinguishable from a missing id
    assert alices.args_json not in err.value.message
    assert (await app.get_approval(ADMIN, pb.GetApprovalRequest(
        approval_id=alices.approval_id))).approval.approval_id == alices.approval_id


async def test_list_paging_skips_invisible_records(harness: Harness) -> None:
    app = await harness.start()
    mine = [await _waiting_approval(app, USER, f"a{i}") for i in range(2)]
    await _waiting_approval(app, OTHER_USER, "m")
    mine.append(await _waiting_approval(app, USER, "a2"))
    seen, cursor = [], ""
    for _ in range(5):
        page = await app.list_approvals(USER, pb.ListApprovalsRequest(
            limit=1, after_approval_id=cursor))
        seen += [a.approval_id for a in page.approvals]
        cursor = page.next_after_approval_id
        if not cursor:
            break
    assert seen == [a.approval_id for a in mine]


@pytest.mark.parametrize("rpc", ["verify", "export", "checkpoint", "prune"])
async def test_journal_admin_rpcs_need_an_operator(harness: Harness, rpc: str) -> None:
    app = await harness.start()
    await _waiting_approval(app, USER, "j")
    with pytest.raises(PalyraError) as err:
        if rpc == "verify":
            await app.verify_journal(USER, pb.VerifyJournalRequest())
        elif rpc == "export":
            async for _ in app.export_journal(USER, pb.ExportJournalRequest()):
                pass
        elif rpc == "prune":
            await app.prune_journal(USER, pb.PruneJournalRequest(older_than_days=0))
        else:
            await app.create_checkpoint(USER, pb.CreateCheckpointRequest())
    assert err.value.code is ErrorCode.PERMISSION_DENIED
    assert "'admin:'" in err.value.message and "'system:'" in err.value.message
    assert "user:alice" in err.value.message
    # The head stays open to any authenticated caller.
    head = await app.get_journal_head(USER, pb.GetJournalHeadRequest())
    assert head.event_count > 0
    # Operators may.
    assert (await app.verify_journal(SYSTEM, pb.VerifyJournalRequest())).ok
    assert [c async for c in app.export_journal(ADMIN, pb.ExportJournalRequest())][-1].done


async def test_create_checkpoint_signs_the_live_head(harness: Harness) -> None:
    app = await harness.start()
    await _waiting_approval(app, USER, "c")
    made = await app.create_checkpoint(ADMIN, pb.CreateCheckpointRequest())
    head = await app.get_journal_head(ADMIN, pb.GetJournalHeadRequest())
    assert made.position == head.event_count and made.head_hash == head.head_hash
    assert len(made.public_key) == 64 and len(made.signature) == 128
    assert made.ts_unix_ms > 0
    assert harness.store is not None
    [stored] = harness.store.checkpoints()
    assert (stored.position, stored.signature) == (made.position, made.signature)
    await harness.stop()
    report = verify_store(harness.data_dir, trusted_keys=[bytes.fromhex(made.public_key)])
    assert report.ok and report.checkpoints >= 1
    harness.store = None  # already stopped
