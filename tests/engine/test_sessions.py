"""Session resolution (§6): identity binding, selectors, reset, cleanup, branch, listing."""

from __future__ import annotations

import pytest
from engine_harness import DEVICE, USER, Harness, run_to_end
from palyra_gen.palyra import v1 as pb

from palyra.app import CallContext
from palyra.core.errors import ErrorCode, PalyraError

OTHER_DEVICE = CallContext.for_principal("user:alice", "01J00000000000000000000002")


async def test_get_or_create_and_identity_binding(harness: Harness) -> None:
    app = await harness.start()
    first = await app.resolve_session(USER, pb.ResolveSessionRequest(session_key="  k1 "))
    assert first.created and first.session.session_key == "k1"
    again = await app.resolve_session(USER, pb.ResolveSessionRequest(session_key="k1"))
    assert not again.created and again.session.session_id == first.session.session_id
    for ctx in (OTHER_DEVICE, CallContext.for_principal("user:bob", DEVICE)):
        with pytest.raises(PalyraError) as err:
            await app.resolve_session(ctx, pb.ResolveSessionRequest(session_key="k1"))
        assert err.value.code is ErrorCode.SESSION_IDENTITY_MISMATCH
        with pytest.raises(PalyraError) as err:
            await app.create_run(ctx, pb.CreateRunRequest(session_key="k1",
                                                           input=pb.MessageInput(text="x")))
        assert err.value.code is ErrorCode.SESSION_IDENTITY_MISMATCH
    with pytest.raises(PalyraError) as err:
        await app.resolve_session(USER, pb.ResolveSessionRequest(session_key="nope",
                                                                 require_existing=True))
    assert err.value.code is ErrorCode.NOT_FOUND
    other = await app.resolve_session(USER, pb.ResolveSessionRequest(session_key="k2"))
    with pytest.raises(PalyraError) as err:
        await app.resolve_session(USER, pb.ResolveSessionRequest(
            session_id=other.session.session_id, session_key="k1"))
    assert err.value.code is ErrorCode.STATE_CONFLICT


async def test_label_lookup_reset_and_run_linkage(harness: Harness) -> None:
    app = await harness.start()
    created = await app.resolve_session(USER, pb.ResolveSessionRequest(session_label="notes"))
    run = await run_to_end(app, "hi", session_label="notes")
    assert run.session_id == created.session.session_id
    found = await app.resolve_session(USER, pb.ResolveSessionRequest(session_label="notes"))
    assert found.session.last_run_id == run.run_id and found.session.run_count == 1
    reset = await app.resolve_session(USER, pb.ResolveSessionRequest(
        session_label="notes", reset_session=True))
    assert reset.reset_applied and reset.session.last_run_id == ""
    assert reset.session.session_key == created.session.session_key


async def test_cleanup_archives_and_frees_the_key(harness: Harness) -> None:
    app = await harness.start()
    first = await app.resolve_session(USER, pb.ResolveSessionRequest(session_key="tmp"))
    sid = first.session.session_id
    cleaned = await app.cleanup_session(USER, pb.CleanupSessionRequest(session_id=sid))
    assert cleaned.cleaned and cleaned.newly_archived and cleaned.previous_session_key == "tmp"
    repeat = await app.cleanup_session(USER, pb.CleanupSessionRequest(session_id=sid))
    assert not repeat.cleaned
    fresh = await app.resolve_session(USER, pb.ResolveSessionRequest(session_key="tmp"))
    assert fresh.created and fresh.session.session_id != sid
    listed = await app.list_sessions(USER, pb.ListSessionsRequest(include_archived=True))
    keys = [s.session_key for s in listed.sessions]
    assert "tmp" in keys and any(k.startswith(f"archived:{sid}:") for k in keys)
    with pytest.raises(PalyraError) as archived:
        await app.resolve_session(USER, pb.ResolveSessionRequest(session_id=sid))
    assert archived.value.code is ErrorCode.STATE_CONFLICT


async def test_branching_while_the_latest_run_is_active_is_a_conflict(harness: Harness) -> None:
    app = await harness.start()
    open_run = await app.create_run(USER, pb.CreateRunRequest(
        v=1, session_key="busy", input=pb.MessageInput(text="hello")))
    assert open_run.run is not None
    with pytest.raises(PalyraError) as busy:
        await app.branch_session(USER, pb.BranchSessionRequest(
            session_id=open_run.run.session_id, session_label="alt"))
    assert busy.value.code is ErrorCode.STATE_CONFLICT


async def test_branch_and_keyset_listing(harness: Harness) -> None:
    app = await harness.start()
    for i in range(5):
        await app.resolve_session(USER, pb.ResolveSessionRequest(session_key=f"key-{i}"))
    await app.resolve_session(CallContext.for_principal("user:bob", DEVICE),
                              pb.ResolveSessionRequest(session_key="bob"))
    page = await app.list_sessions(USER, pb.ListSessionsRequest(limit=2))
    assert [s.session_key for s in page.sessions] == ["key-0", "key-1"]
    rest = await app.list_sessions(USER, pb.ListSessionsRequest(
        after_session_key=page.next_after_session_key, limit=10))
    assert [s.session_key for s in rest.sessions] == ["key-2", "key-3", "key-4"]
    assert rest.next_after_session_key == ""
    run = await run_to_end(app, "hello", session_key="key-0")
    branched = await app.branch_session(USER, pb.BranchSessionRequest(
        session_id=run.session_id, session_label="alt"))
    assert branched.session.branch_state == "active_branch"
    assert branched.session.origin_run_id == run.run_id
    assert branched.source.branch_state == "branch_source"
