"""Tape events: ``EventDraft`` in, ``palyra.v1.TapeEvent`` out.

Contract (docs/architecture.md): a tape event's ``kind`` is
``tape.<oneof field name>`` and its ``payload`` is the proto3 canonical JSON
(``to_dict()``) of the ``TapeEvent`` oneof member. The journal assigns the
dense ``tape_seq``; this module only translates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import betterproto2
from palyra_gen.palyra import v1 as pb

from palyra.core.protojson import decode_message, encode_message
from palyra.engine._records import IdentityRec
from palyra.journal import EntityWrite, EventDraft, StoredEvent

ACTOR = "system:engine"

# oneof field name -> member message class. Mirrors palyra.v1.TapeEvent.event.
MEMBER_TYPES: dict[str, type[betterproto2.Message]] = {
    "status": pb.RunStatus,
    "model_token": pb.ModelToken,
    "tool_proposal": pb.ToolProposal,
    "tool_decision": pb.ToolDecision,
    "tool_approval_request": pb.ToolApprovalRequest,
    "tool_approval_response": pb.ToolApprovalResponse,
    "tool_result": pb.ToolResult,
    "tool_attestation": pb.ToolAttestation,
    "message_replied": pb.MessageReplied,
    "user_input": pb.UserInput,
    "agent_loop": pb.AgentLoop,
    "provider_turn_output": pb.ProviderTurnOutput,
    "tool_catalog_snapshot": pb.ToolCatalogSnapshot,
    "error": pb.RunError,
}
_FIELD_OF: dict[type[betterproto2.Message], str] = {cls: f for f, cls in MEMBER_TYPES.items()}
KIND_PREFIX = "tape."


def field_of(member: betterproto2.Message) -> str:
    """The TapeEvent oneof field name for a member message."""
    return _FIELD_OF[type(member)]


def tape_draft(
    *,
    run_id: str,
    session_id: str,
    identity: IdentityRec,
    member: betterproto2.Message,
    entity_writes: Sequence[EntityWrite] = (),
) -> EventDraft:
    """An ``EventDraft`` that puts ``member`` on the run's tape."""
    return EventDraft(
        kind=KIND_PREFIX + field_of(member),
        actor=ACTOR,
        session_id=session_id,
        run_id=run_id,
        tape=True,
        payload=encode_message(member),
        principal=identity.principal,
        device_id=identity.device_id,
        channel=identity.channel,
        entity_writes=tuple(entity_writes),
    )


def member_from(kind: str, payload: Mapping[str, Any]) -> betterproto2.Message | None:
    """Rebuild the typed oneof member of a stored tape event (None if not a tape kind)."""
    if not kind.startswith(KIND_PREFIX):
        return None
    cls = MEMBER_TYPES.get(kind[len(KIND_PREFIX) :])
    if cls is None:
        return None
    # Same message as cls.from_dict(payload, ignore_unknown_fields=True), without
    # betterproto2's per-key regex work (the hottest read path: every watcher event).
    return decode_message(cls, payload, ignore_unknown_fields=True)


def to_tape_event(event: StoredEvent) -> pb.TapeEvent:
    """The wire ``TapeEvent`` of a stored tape event."""
    out = pb.TapeEvent(
        run_id=event.run_id,
        tape_seq=max(event.tape_seq, 0),
        position=event.position,
        ts_unix_ms=event.ts_ms,
        session_id=event.session_id,
    )
    member = member_from(event.kind, event.payload)
    if member is not None:
        setattr(out, field_of(member), member)
    return out


def is_terminal_status(member: betterproto2.Message | None) -> bool:
    """True for the status event that ends a run (always its last tape event)."""
    return isinstance(member, pb.RunStatus) and member.state in (
        pb.RunState.DONE,
        pb.RunState.FAILED,
        pb.RunState.CANCELLED,
    )
