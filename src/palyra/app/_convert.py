"""Engine records → wire messages (the one place), and request checks shared by the RPCs."""

from __future__ import annotations

from typing import Any

import betterproto2
from palyra_gen.palyra import v1 as pb

from palyra.app.context import CallContext
from palyra.core.errors import ErrorCode, PalyraError, Unauthenticated
from palyra.engine import (
    SCOPE_PROTO,
    ApprovalRecord,
    IdentityRec,
    RunRecord,
    SessionRecord,
    approval_state_proto,
    member_from,
    prompt_proto,
    risk_proto,
    run_state_proto,
    tape_field_of,
)
from palyra.journal import StoredEvent

SUPPORTED_VERSIONS = frozenset({0, 1})
_POSTURE_PROTO = {"always_allow": pb.ToolPosture.ALWAYS_ALLOW,
                  "ask_each_time": pb.ToolPosture.ASK_EACH_TIME,
                  "disabled": pb.ToolPosture.DISABLED}
POSTURE_NAMES = {v: k for k, v in _POSTURE_PROTO.items()}
#: Wire scope -> the scope name records store.
SCOPE_NAMES = {v: k for k, v in SCOPE_PROTO.items()}


def identity_of(ctx: CallContext) -> IdentityRec:
    """The caller's identity.

    Raises:
        Unauthenticated: the call carried no credentials.
    """
    if ctx.identity is None or not ctx.identity.principal:
        raise Unauthenticated("this call needs an authenticated principal")
    return ctx.identity.record()


def check_version(v: int) -> None:
    """Raise UNSUPPORTED_VERSION unless ``v`` is 0 (unset) or 1."""
    if v not in SUPPORTED_VERSIONS:
        raise PalyraError(f"protocol version {v} is not supported (use 1)",
                          code=ErrorCode.UNSUPPORTED_VERSION, details={"v": str(v)})


def identity_proto(identity: IdentityRec) -> pb.Identity:
    """Wire identity."""
    return pb.Identity(principal=identity.principal, device_id=identity.device_id,
                       channel=identity.channel)


def run_proto(record: RunRecord) -> pb.Run:
    """Wire form of a run record."""
    error = None
    if record.error_code:
        code = pb.ErrorCode.__members__.get(record.error_code, pb.ErrorCode.INTERNAL)
        error = pb.ErrorDetail(code=code, message=record.error_message)
    return pb.Run(
        run_id=record.run_id, session_id=record.session_id,
        state=run_state_proto(record.state), identity=identity_proto(record.identity),
        created_at_unix_ms=record.created_ms, updated_at_unix_ms=record.updated_ms,
        tape_len=record.tape_len, turn_count=record.turn_count,
        tool_call_count=record.tool_call_count, pending_approval_id=record.pending_approval_id,
        end_reason=record.end_reason, last_error=error, final_text=record.final_text,
        agent_id=record.agent_id, parent_run_id=record.parent_run_id,
        delegation_depth=record.delegation_depth,
    )


def session_proto(record: SessionRecord) -> pb.Session:
    """Wire form of a session record."""
    return pb.Session(
        session_id=record.session_id, session_key=record.session_key, label=record.label,
        identity=identity_proto(record.identity), created_at_unix_ms=record.created_ms,
        updated_at_unix_ms=record.updated_ms, last_run_id=record.last_run_id,
        archived=record.archived, branch_state=record.branch_state,
        parent_session_id=record.parent_session_id, origin_run_id=record.origin_run_id,
        run_count=record.run_count,
        tool_postures={k: _POSTURE_PROTO[v] for k, v in record.tool_postures.items()
                       if v in _POSTURE_PROTO},
    )


def approval_proto(record: ApprovalRecord) -> pb.Approval:
    """Wire form of an approval record."""
    return pb.Approval(
        approval_id=record.approval_id, session_id=record.session_id, run_id=record.run_id,
        proposal_id=record.proposal_id, tool_name=record.tool_name,
        args_digest=record.args_digest, args_json=record.args_json,
        policy_hash=record.policy_hash,
        risk_level=risk_proto(record.risk_level),
        prompt=prompt_proto(record.prompt), state=approval_state_proto(record.state),
        scope=SCOPE_PROTO.get(record.scope, pb.ApprovalScope.UNSPECIFIED),
        created_at_unix_ms=record.created_ms, expires_at_unix_ms=record.expires_at_ms,
        decided_by=record.decided_by, decided_at_unix_ms=record.decided_at_ms,
        reason=record.reason, ttl_seconds=record.ttl_seconds,
        requested_by=identity_proto(record.requested_by),
    )


def tape_event_proto(event: StoredEvent) -> pb.TapeEvent:
    """The wire ``TapeEvent`` of a stored tape event."""
    return tape_event_with(event, tape_member(event))


def tape_member(event: StoredEvent) -> betterproto2.Message | None:
    """The typed oneof member of a stored tape event (as :func:`tape_event_proto` sets it).

    A live event carries the member the engine built it from (only when
    redaction changed nothing, so it equals the stored payload): no decode.
    """
    origin = event.origin
    if origin is not None:
        # isinstance(origin, betterproto2.Message), answered per class: the ABC's
        # __instancecheck__ is a Python call, and this runs for every event a watcher gets.
        cls = origin.__class__
        is_message = _IS_MESSAGE.get(cls)
        if is_message is None:
            is_message = _IS_MESSAGE[cls] = issubclass(cls, betterproto2.Message)
        if is_message:
            return origin  # type: ignore[no-any-return]
    return member_from(event.kind, event.payload)


# Class -> is a betterproto2 message (origins are the tape's few member classes).
_IS_MESSAGE: dict[type, bool] = {}


def tape_event_with(event: StoredEvent, member: betterproto2.Message | None) -> pb.TapeEvent:
    """:func:`tape_event_proto` with the member already at hand (see :func:`tape_member`)."""
    fields: dict[str, Any] = {tape_field_of(member): member} if member is not None else {}
    # The member as a constructor argument: one __init__, no oneof bookkeeping after.
    return pb.TapeEvent(run_id=event.run_id, tape_seq=max(event.tape_seq, 0),
                        position=event.position, ts_unix_ms=event.ts_ms,
                        session_id=event.session_id, **fields)
