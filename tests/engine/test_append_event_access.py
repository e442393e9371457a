"""AppendEvent follows the access rule of every other run RPC (issue 12, item 3).

The attack of the outside campaign, replayed: bob appends into alice's session
chain, spoofing ``actor: system:engine`` and forging a ``TAPE.message_replied``;
ids that name nothing, or are not ULIDs, are accepted; ``Tape.status`` slips past
the reserved-kind check. Each is now refused with a stable code, and nothing is
journaled.
"""

from __future__ import annotations

import pytest
from engine_harness import ADMIN, DEVICE, USER, Harness, run_to_end
from palyra_gen.palyra import v1 as pb

from palyra.app import CallContext
from palyra.core.errors import ErrorCode, PalyraError

BOB = CallContext.for_principal("user:bob", DEVICE)


async def _refused(app: object, ctx: CallContext, request: pb.AppendEventRequest,
                   code: ErrorCode) -> None:
    with pytest.raises(PalyraError) as err:
        await app.append_event(ctx, request)  # type: ignore[attr-defined]
    assert err.value.code is code, (request, err.value.message)


async def test_nobody_writes_into_another_principals_chain(harness: Harness) -> None:
    app = await harness.start()
    assert harness.store is not None
    alice = await run_to_end(app, "hello")
    other = await run_to_end(app, "another session", session_key="other")
    head = harness.store.head()

    def req(**changes: object) -> pb.AppendEventRequest:
        fields: dict[str, object] = dict(v=1, session_id=alice.session_id,
                                         run_id=alice.run_id, kind="client.note",
                                         actor="user:bob", timestamp_unix_ms=1)
        fields.update(changes)
        return pb.AppendEventRequest(**fields)  # type: ignore[arg-type]

    # Bob into alice's run: the run is not his.
    await _refused(app, BOB, req(), ErrorCode.PERMISSION_DENIED)
    # Spoofed daemon actor and a forged tape event, by anyone, in any letter case.
    await _refused(app, BOB, req(actor="system:engine"), ErrorCode.PERMISSION_DENIED)
    await _refused(app, USER, req(actor="system:engine"), ErrorCode.PERMISSION_DENIED)
    await _refused(app, ADMIN, req(actor="System:Engine"), ErrorCode.PERMISSION_DENIED)
    for kind in ("TAPE.message_replied", "Tape.status", " tape.status", "RUN.updated"):
        await _refused(app, USER, req(kind=kind, actor="user:alice"), ErrorCode.INVALID_ARGUMENT)
    # Alice may not claim to be someone else either.
    await _refused(app, USER, req(actor="user:bob"), ErrorCode.PERMISSION_DENIED)
    await _refused(app, USER, req(actor="user:alicex"), ErrorCode.PERMISSION_DENIED)
    # Ids that name nothing, or are not ids at all.
    await _refused(app, USER, req(actor="user:alice", session_id="whatever"),
                   ErrorCode.INVALID_ARGUMENT)
    await _refused(app, USER, req(actor="user:alice", run_id="whatever"),
                   ErrorCode.INVALID_ARGUMENT)
    await _refused(app, USER, req(actor="user:alice", run_id="01J00000000000000000000000"),
                   ErrorCode.NOT_FOUND)
    # A run of another session: the ids conflict with what is stored (409, not 400).
    await _refused(app, USER, req(actor="user:alice", session_id=other.session_id),
                   ErrorCode.STATE_CONFLICT)
    # Nothing of the above reached the journal.
    assert harness.store.head() == head
    # The owner (and an operator, under any non-daemon actor) still may.
    mine = await app.append_event(USER, req(actor="user:alice"))
    ops = await app.append_event(ADMIN, req(actor="admin:ops/auditor"))
    assert mine.accepted and ops.accepted
