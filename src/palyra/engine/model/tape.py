"""The tape's vocabulary: which message is which tape event, both ways.

Contract (docs/architecture.md): a tape event's ``kind`` is
``tape.<oneof field name>`` and its ``payload`` is the proto3 canonical JSON
(``to_dict()``) of the ``TapeEvent`` oneof member. The journal assigns the
dense ``tape_seq``; ``run.writer`` drafts events with :func:`kind_of` and
:func:`payload_of`, recovery folds them back with :func:`member_from`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import betterproto2
from palyra_gen.palyra import v1 as pb
from palyra_gen.proto_json import JSON_ENCODERS

from palyra.core.protojson import decode_message, encode_message

#: The journal ``actor`` of every event the engine writes on its own account.
ENGINE_ACTOR = "system:engine"

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
    "context_stage": pb.ContextStage,
    "session_compaction": pb.SessionCompaction,
}
_FIELD_OF: dict[type[betterproto2.Message], str] = {cls: f for f, cls in MEMBER_TYPES.items()}
KIND_PREFIX = "tape."


#: Member class -> (its ``kind``, its proto3 JSON encoder): what :func:`kind_of` and
#: :func:`payload_of` give, in one lookup for the writer that drafts every tape event.
DRAFTING: dict[type[betterproto2.Message], tuple[str, Callable[[Any], dict[str, Any]]]] = {
    cls: (KIND_PREFIX + f, JSON_ENCODERS.get(cls, encode_message))
    for f, cls in MEMBER_TYPES.items()
}


def field_of(member: betterproto2.Message) -> str:
    """The TapeEvent oneof field name for a member message."""
    return _FIELD_OF[type(member)]


def kind_of(member: betterproto2.Message) -> str:
    """The journal ``kind`` of a tape member (``tape.<oneof field name>``)."""
    return KIND_PREFIX + _FIELD_OF[type(member)]


def payload_of(member: betterproto2.Message) -> dict[str, Any]:
    """The journal payload of a tape member: its proto3 canonical JSON."""
    return encode_message(member)


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


_TERMINAL_STATES = frozenset({pb.RunState.DONE, pb.RunState.FAILED, pb.RunState.CANCELLED})


def is_terminal_status(member: betterproto2.Message | None) -> bool:
    """True for the status event that ends a run (always its last tape event)."""
    # By exact class, as the fold dispatches (generated messages are never subclassed):
    # isinstance against betterproto2's ABC-based classes goes through
    # ABCMeta.__instancecheck__, and this is asked of every event a watcher is handed.
    return member.__class__ is pb.RunStatus and member.state in _TERMINAL_STATES
