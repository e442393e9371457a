"""Approval records as pure functions: create one bound to the exact call, decide it.

Records live in the ``approvals`` entity table (``run.approvals``) and are only
ever written inside the owning run's batches, so an approval state change and
the tape event announcing it are one commit. Deciding is routed to the run's
step mailbox (``run.step``), never written from here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from palyra_gen.palyra import v1 as pb

from palyra.core.ids import new_ulid
from palyra.engine.model.lifecycle import ApprovalEvent, ApprovalStateId, approval_next
from palyra.engine.model.records import ApprovalRecord, IdentityRec, PromptRec

OPTIONS = ("allow_once", "allow_session", "allow_timeboxed", "deny_once")
#: Scope name (as records store it) -> wire enum, for tape members.
SCOPE_PROTO = {"once": pb.ApprovalScope.ONCE, "session": pb.ApprovalScope.SESSION,
               "timeboxed": pb.ApprovalScope.TIMEBOXED}
# ``json.dumps`` with options builds an encoder per call: the two an approval's
# texts are written with, made once (the same text as the calls they replace).
_ARGS_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode
_DETAILS_JSON = json.JSONEncoder().encode
_RISKS = {"low": pb.RiskLevel.LOW, "medium": pb.RiskLevel.MEDIUM, "high": pb.RiskLevel.HIGH,
          "critical": pb.RiskLevel.CRITICAL}


@dataclass(frozen=True, slots=True)
class Decision:
    """A human (or timeout) answer for one pending approval.

    ``event`` is the approval machine event: ``approve``, ``deny`` or ``time_out``.
    """

    event: ApprovalEvent
    scope: str
    ttl_seconds: int
    reason: str
    decided_by: str
    decided_at_ms: int


def new_record(
    *,
    session_id: str,
    run_id: str,
    proposal_id: str,
    tool_name: str,
    arguments: Mapping[str, Any],
    args_digest: str,
    policy_hash: str,
    risk_level: str,
    policy_explanation: str,
    requested_by: IdentityRec,
    now_ms: int,
    timeout_s: float,
) -> ApprovalRecord:
    """A pending approval bound to the exact tool call."""
    args_json = _ARGS_JSON(dict(arguments))
    summary = f"{tool_name}({args_json})"
    if len(summary) > 512:
        summary = summary[:509] + "..."
    prompt = PromptRec(
        title=f"Approve {tool_name}",
        risk_level=risk_level,
        subject_id=f"tool:{tool_name}",
        summary=summary,
        options=OPTIONS,
        timeout_seconds=max(1, round(timeout_s)),
        details_json=_DETAILS_JSON({"tool": tool_name, "args_digest": args_digest}),
        policy_explanation=policy_explanation,
    )
    return ApprovalRecord(
        approval_id=new_ulid(), session_id=session_id, run_id=run_id, proposal_id=proposal_id,
        tool_name=tool_name, args_digest=args_digest, args_json=args_json,
        policy_hash=policy_hash, risk_level=risk_level, prompt=prompt, state=ApprovalStateId.PENDING,
        created_ms=now_ms, expires_at_ms=now_ms + int(timeout_s * 1000),
        requested_by=requested_by,
    )


def decided(record: ApprovalRecord, decision: Decision) -> ApprovalRecord:
    """The record after ``decision`` (checked by the approval machine)."""
    return msgspec.structs.replace(
        record,
        state=approval_next(record.state, decision.event),
        scope=decision.scope if decision.event != ApprovalEvent.TIME_OUT else "",
        ttl_seconds=decision.ttl_seconds,
        decided_by=decision.decided_by,
        decided_at_ms=decision.decided_at_ms,
        reason=decision.reason,
    )


def transitioned(record: ApprovalRecord, event: str, reason: str = "") -> ApprovalRecord:
    """The record after a machine ``event`` such as ``cancel`` or ``expire``."""
    return msgspec.structs.replace(record, state=approval_next(record.state, event),
                                   reason=reason or record.reason)


def prompt_proto(p: PromptRec) -> pb.ApprovalPrompt:
    """Wire form of an approval prompt."""
    return pb.ApprovalPrompt(
        title=p.title, risk_level=risk_proto(p.risk_level),
        subject_id=p.subject_id, summary=p.summary, options=list(p.options),
        timeout_seconds=p.timeout_seconds, details_json=p.details_json,
        policy_explanation=p.policy_explanation,
    )


def risk_proto(level: str) -> pb.RiskLevel:
    """Wire enum of a risk level name (unknown names are HIGH: unknown is dangerous)."""
    return _RISKS.get(level, pb.RiskLevel.HIGH)
