"""Approval decisions relayed through the journal to the daemon that owns the run.

Several daemons on one journal: a run waits for its approval on the daemon
that owns its session, but a person may decide on any daemon. A daemon without
the run's actor writes the decision into the journal instead (an
``approval.relayed`` event carrying a ``meta`` row keyed by the approval); the
owner, while it waits on that approval, reads the row every
``RELAY_POLL_S`` and applies it exactly as a local decision, deleting the row
in the same commit. A run resumed by another daemon after a takeover waits on
the approval again and so finds the row too. Nothing depends on a
notification; the row is the message.

A decider does not wait forever, and a decision it gave up on never lands: as a
handed-over input (``run.inbox``), the row carries a deadline on the database's
clock (the end of the decider's wait), the owner's decision commit and the
decider's give-up (``approval.relay_withdrawn``) are each a compare-and-set on the
row as relayed, and only the first lands. An owner ignores a row past its deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgspec

from palyra.core.errors import ErrorCode, PalyraError
from palyra.engine.model.approvals import Decision
from palyra.engine.model.errors import coded
from palyra.engine.model.lifecycle import ApprovalEvent, ApprovalStateId
from palyra.engine.model.records import ApprovalRecord, redact_str
from palyra.engine.model.tape import ENGINE_ACTOR
from palyra.engine.run.approvals import ApprovalReader
from palyra.journal import EntityWrite, EventDraft, JournalStore, RowExpectation

RELAY_TABLE = "meta"
RELAY_PREFIX = "approval_relay:"
RELAY_POLL_S = 0.25
"""How often an owner waiting on an approval looks for a relayed decision."""


class RelayedDecision(msgspec.Struct, frozen=True):
    """A :class:`Decision` as the relay row stores it."""

    event: str
    scope: str
    ttl_seconds: int
    reason: str
    decided_by: str
    decided_at_ms: int
    deadline_ms: int = 0
    """The end of the decider's wait, on the database's clock: no owner applies the
    decision from then on (0: none, a row written before deadlines)."""


class Relayed(msgspec.Struct, frozen=True):
    """A relayed decision as an owner found it, with the condition of its commit."""

    decision: Decision
    consumed: RowExpectation
    """The row as relayed is still there: the owner's commit of the decision and the
    decider's give-up each expect it, so only one of them lands. The owner's also
    stands on the row's deadline, judged on the database's clock in its commit's
    transaction: read in time and committed late, the decision is not recorded."""


def relay_key(approval_id: str) -> str:
    """The relay row's key for ``approval_id``."""
    return RELAY_PREFIX + approval_id


def relay_draft(record: ApprovalRecord, decision: Decision, deadline_ms: int) -> EventDraft:
    """The event that relays ``decision`` on ``record`` to the run's owner (with its row,
    which no owner applies from ``deadline_ms`` on, the database's clock)."""
    # Redacted like the approval row it becomes: a reason may quote a secret.
    row = RelayedDecision(str(decision.event), decision.scope, decision.ttl_seconds,
                          redact_str(decision.reason), decision.decided_by,
                          decision.decided_at_ms, deadline_ms)
    return EventDraft(
        kind="approval.relayed", actor=ENGINE_ACTOR, session_id=record.session_id,
        run_id=record.run_id, principal=decision.decided_by,
        payload={"approval_id": record.approval_id, "decision": str(decision.event)},
        entity_writes=(EntityWrite(RELAY_TABLE, relay_key(record.approval_id),
                                   msgspec.json.encode(row)),))


def read_relayed(store: JournalStore, approval_id: str, now_ms: int) -> Relayed | None:
    """The decision relayed for ``approval_id``, if any whose decider still waits
    (``now_ms``: the database's clock)."""
    raw = store.get_entity(RELAY_TABLE, relay_key(approval_id))
    if raw is None:
        return None
    try:
        row = msgspec.json.decode(raw, type=RelayedDecision)
    except msgspec.DecodeError:
        return None  # a newer version's row: its decider times out retryably
    if 0 < row.deadline_ms <= now_ms:
        return None  # its decider has stopped waiting (or died): never applied
    return Relayed(Decision(ApprovalEvent(row.event), row.scope, row.ttl_seconds, row.reason,
                            row.decided_by, row.decided_at_ms),
                   RowExpectation(RELAY_TABLE, relay_key(approval_id), raw, row.deadline_ms))


def clear_relay(approval_id: str) -> EntityWrite:
    """Delete the relay row (in the commit that records the decision)."""
    return EntityWrite(RELAY_TABLE, relay_key(approval_id), None)


def withdrawn(approval_id: str, exc: PalyraError) -> bool:
    """Whether ``exc`` refused a commit because the relay row of ``approval_id`` is not
    the one it expected (its decider gave up, or the decision was recorded otherwise)."""
    return (exc.code is ErrorCode.STATE_CONFLICT
            and exc.details.get("key") == relay_key(approval_id))


async def relay_decision(store: JournalStore, reader: ApprovalReader, record: ApprovalRecord,
                         decision: Decision, wait_s: float,
                         now_ms: Callable[[], int]) -> ApprovalRecord:
    """Relay ``decision`` to the run's owner; return the record once the owner committed it.

    ``now_ms``: the database's clock, on which the decision's deadline is set ``wait_s``
    from now.

    Raises:
        PalyraError: ``APPROVAL_ALREADY_DECIDED`` when another decision landed
            first; ``UNAVAILABLE`` (retryable) when no owner recorded it within
            ``wait_s``: the decision was withdrawn and never lands.
    """
    handed = relay_draft(record, decision, now_ms() + int(wait_s * 1000))
    await store.append([handed])
    try:
        current = await _decided(reader, record.approval_id, wait_s)
    except TimeoutError:
        current = await _give_up(store, reader, record, handed.entity_writes[0])
    if (current.decided_by != decision.decided_by
            or current.reason != redact_str(decision.reason)):
        raise coded(ErrorCode.APPROVAL_ALREADY_DECIDED,
                    f"approval {record.approval_id} is already {current.state}",
                    approval_id=record.approval_id)
    return current


async def _give_up(store: JournalStore, reader: ApprovalReader, record: ApprovalRecord,
                   row: EntityWrite) -> ApprovalRecord:
    """Withdraw the relayed decision whose row is ``row``; the approval as decided when
    the decision was recorded first (by this relay or otherwise).

    Raises:
        PalyraError: ``UNAVAILABLE`` once withdrawn, or when the give-up could not be
            committed (the row's deadline, now past, keeps owners from applying it).
    """
    assert row.value is not None
    approval_id = record.approval_id
    unavailable = coded(ErrorCode.UNAVAILABLE, f"the decision on {approval_id} was relayed "
                        "to the daemon that owns its run, which did not record it in time; "
                        "it was withdrawn and will not be recorded", approval_id=approval_id)
    try:
        await store.append([EventDraft(
            kind="approval.relay_withdrawn", actor=ENGINE_ACTOR, session_id=record.session_id,
            run_id=record.run_id, payload={"approval_id": approval_id},
            entity_writes=(clear_relay(approval_id),))],
            expect=(RowExpectation(row.table, row.key, row.value),))
    except PalyraError as exc:
        if not withdrawn(approval_id, exc):
            raise unavailable from exc
        # Consumed first: the decision (this one or another) is committed.
        current = reader.get(approval_id, fresh=True)
        if current is not None and current.state != ApprovalStateId.PENDING:
            return current
    raise unavailable


async def _decided(reader: ApprovalReader, approval_id: str, wait_s: float) -> ApprovalRecord:
    async with asyncio.timeout(wait_s):
        while True:
            current = reader.get(approval_id)
            if current is not None and current.state != ApprovalStateId.PENDING:
                return current
            await asyncio.sleep(RELAY_POLL_S / 5)
