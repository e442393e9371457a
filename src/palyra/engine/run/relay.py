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
"""

from __future__ import annotations

import asyncio

import msgspec

from palyra.core.errors import ErrorCode
from palyra.engine.model.approvals import Decision
from palyra.engine.model.errors import coded
from palyra.engine.model.lifecycle import ApprovalEvent, ApprovalStateId
from palyra.engine.model.records import ApprovalRecord, redact_str
from palyra.engine.model.tape import ENGINE_ACTOR
from palyra.engine.run.approvals import ApprovalReader
from palyra.journal import EntityWrite, EventDraft, JournalStore

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


def relay_key(approval_id: str) -> str:
    """The relay row's key for ``approval_id``."""
    return RELAY_PREFIX + approval_id


def relay_draft(record: ApprovalRecord, decision: Decision) -> EventDraft:
    """The event that relays ``decision`` on ``record`` to the run's owner (with its row)."""
    # Redacted like the approval row it becomes: a reason may quote a secret.
    row = RelayedDecision(str(decision.event), decision.scope, decision.ttl_seconds,
                          redact_str(decision.reason), decision.decided_by,
                          decision.decided_at_ms)
    return EventDraft(
        kind="approval.relayed", actor=ENGINE_ACTOR, session_id=record.session_id,
        run_id=record.run_id, principal=decision.decided_by,
        payload={"approval_id": record.approval_id, "decision": str(decision.event)},
        entity_writes=(EntityWrite(RELAY_TABLE, relay_key(record.approval_id),
                                   msgspec.json.encode(row)),))


def read_relayed(store: JournalStore, approval_id: str) -> Decision | None:
    """The decision relayed for ``approval_id``, if any."""
    raw = store.get_entity(RELAY_TABLE, relay_key(approval_id))
    if raw is None:
        return None
    row = msgspec.json.decode(raw, type=RelayedDecision)
    return Decision(ApprovalEvent(row.event), row.scope, row.ttl_seconds, row.reason,
                    row.decided_by, row.decided_at_ms)


def clear_relay(approval_id: str) -> EntityWrite:
    """Delete the relay row (in the commit that records the decision)."""
    return EntityWrite(RELAY_TABLE, relay_key(approval_id), None)


async def relay_decision(store: JournalStore, reader: ApprovalReader, record: ApprovalRecord,
                         decision: Decision, wait_s: float) -> ApprovalRecord:
    """Relay ``decision`` to the run's owner; return the record once the owner committed it.

    Raises:
        PalyraError: ``APPROVAL_ALREADY_DECIDED`` when another decision landed
            first; ``UNAVAILABLE`` (retryable: the decision stays relayed) when
            no owner recorded it within ``wait_s``.
    """
    await store.append([relay_draft(record, decision)])
    try:
        current = await _decided(reader, record.approval_id, wait_s)
    except TimeoutError:
        raise coded(ErrorCode.UNAVAILABLE, f"the decision on {record.approval_id} is "
                    "relayed to the daemon that owns its run, which has not recorded it yet",
                    approval_id=record.approval_id) from None
    if (current.decided_by != decision.decided_by
            or current.reason != redact_str(decision.reason)):
        raise coded(ErrorCode.APPROVAL_ALREADY_DECIDED,
                    f"approval {record.approval_id} is already {current.state}",
                    approval_id=record.approval_id)
    return current


async def _decided(reader: ApprovalReader, approval_id: str, wait_s: float) -> ApprovalRecord:
    async with asyncio.timeout(wait_s):
        while True:
            current = reader.get(approval_id)
            if current is not None and current.state != ApprovalStateId.PENDING:
                return current
            await asyncio.sleep(RELAY_POLL_S / 5)
