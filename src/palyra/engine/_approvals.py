"""Approval records: creation, lookup, listing, proto conversion.

Records live in the ``approvals`` entity table under ``a:<approval_id>`` and
are only ever written inside the owning run's batches, so an approval state
change and the tape event announcing it are one commit. Deciding is routed to
the run's actor (see ``_actor``), never written from here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from palyra_gen.palyra import v1 as pb

from palyra.core.ids import new_ulid
from palyra.engine._machines import approval_next, approval_state_proto
from palyra.engine._records import (
    APPROVALS,
    ApprovalRecord,
    IdentityRec,
    PromptRec,
    decode,
    encode,
)
from palyra.journal import EntityWrite, JournalStore

PREFIX = "a:"
OPTIONS = ("allow_once", "allow_session", "allow_timeboxed", "deny_once")
SCOPES = {pb.ApprovalScope.ONCE: "once", pb.ApprovalScope.SESSION: "session",
          pb.ApprovalScope.TIMEBOXED: "timeboxed"}
SCOPE_PROTO = {v: k for k, v in SCOPES.items()}
RISKS = {"low": pb.RiskLevel.LOW, "medium": pb.RiskLevel.MEDIUM, "high": pb.RiskLevel.HIGH,
         "critical": pb.RiskLevel.CRITICAL}
RISK_NAMES = {v: k for k, v in RISKS.items()}
_SCAN_BATCH = 1000  # rows read per store scan while filling a page


@dataclass(frozen=True, slots=True)
class Decision:
    """A human (or timeout) answer for one pending approval.

    ``event`` is the approval machine event: ``approve``, ``deny`` or ``time_out``.
    """

    event: str
    scope: str
    ttl_seconds: int
    reason: str
    decided_by: str
    decided_at_ms: int


def approval_key(approval_id: str) -> str:
    """Entity key of an approval record."""
    return PREFIX + approval_id


def write(record: ApprovalRecord) -> EntityWrite:
    """The entity write of an approval record."""
    return EntityWrite(APPROVALS, approval_key(record.approval_id), encode(record))


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
    args_json = json.dumps(dict(arguments), sort_keys=True, separators=(",", ":"))
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
        details_json=json.dumps({"tool": tool_name, "args_digest": args_digest}),
        policy_explanation=policy_explanation,
    )
    return ApprovalRecord(
        approval_id=new_ulid(), session_id=session_id, run_id=run_id, proposal_id=proposal_id,
        tool_name=tool_name, args_digest=args_digest, args_json=args_json,
        policy_hash=policy_hash, risk_level=risk_level, prompt=prompt, state="pending",
        created_ms=now_ms, expires_at_ms=now_ms + int(timeout_s * 1000),
        requested_by=requested_by,
    )


def decided(record: ApprovalRecord, decision: Decision) -> ApprovalRecord:
    """The record after ``decision`` (checked by the approval machine)."""
    return msgspec.structs.replace(
        record,
        state=approval_next(record.state, decision.event),
        scope=decision.scope if decision.event != "time_out" else "",
        ttl_seconds=decision.ttl_seconds,
        decided_by=decision.decided_by,
        decided_at_ms=decision.decided_at_ms,
        reason=decision.reason,
    )


def transitioned(record: ApprovalRecord, event: str, reason: str = "") -> ApprovalRecord:
    """The record after a machine ``event`` such as ``cancel`` or ``expire``."""
    return msgspec.structs.replace(record, state=approval_next(record.state, event),
                                   reason=reason or record.reason)


class ApprovalReader:
    """Read side of the approvals table."""

    def __init__(self, store: JournalStore) -> None:
        self._store = store

    def get(self, approval_id: str) -> ApprovalRecord | None:
        """The record, or None."""
        if not approval_id:
            return None
        raw = self._store.get_entity(APPROVALS, approval_key(approval_id))
        return decode(ApprovalRecord, raw) if raw is not None else None

    def scan(
        self, keep: Callable[[ApprovalRecord], bool], after_id: str, limit: int
    ) -> tuple[list[ApprovalRecord], str]:
        """Records in id (= creation) order after ``after_id`` that pass ``keep``.

        Returns ``(page, next_after_id)``. ``next_after_id`` is empty only when
        the table holds no row after the page; otherwise more records *may*
        match (the next page can come back empty when none of the remaining
        rows pass ``keep`` — finding that out would mean scanning them all).
        """
        out: list[ApprovalRecord] = []
        cursor = approval_key(after_id) if after_id else ""
        while len(out) < limit:
            rows = self._store.scan_entities(APPROVALS, PREFIX, cursor, _SCAN_BATCH)
            for index, (key, value) in enumerate(rows):
                cursor = key
                record = decode(ApprovalRecord, value)
                if keep(record):
                    out.append(record)
                    if len(out) >= limit:
                        # The page filled mid-batch: rows after this one, in
                        # this batch or a later one, belong to the next page.
                        more = index + 1 < len(rows) or len(rows) == _SCAN_BATCH
                        return out, out[-1].approval_id if more else ""
            if len(rows) < _SCAN_BATCH:
                return out, ""
        return out, ""


def to_proto(record: ApprovalRecord) -> pb.Approval:
    """Wire form of an approval record."""
    p = record.prompt
    return pb.Approval(
        approval_id=record.approval_id, session_id=record.session_id, run_id=record.run_id,
        proposal_id=record.proposal_id, tool_name=record.tool_name,
        args_digest=record.args_digest, args_json=record.args_json,
        policy_hash=record.policy_hash, risk_level=RISKS.get(record.risk_level,
                                                             pb.RiskLevel.HIGH),
        prompt=prompt_proto(p), state=approval_state_proto(record.state),
        scope=SCOPE_PROTO.get(record.scope, pb.ApprovalScope.UNSPECIFIED),
        created_at_unix_ms=record.created_ms, expires_at_unix_ms=record.expires_at_ms,
        decided_by=record.decided_by, decided_at_unix_ms=record.decided_at_ms,
        reason=record.reason, ttl_seconds=record.ttl_seconds,
        requested_by=pb.Identity(principal=record.requested_by.principal,
                                 device_id=record.requested_by.device_id,
                                 channel=record.requested_by.channel),
    )


def prompt_proto(p: PromptRec) -> pb.ApprovalPrompt:
    """Wire form of an approval prompt."""
    return pb.ApprovalPrompt(
        title=p.title, risk_level=RISKS.get(p.risk_level, pb.RiskLevel.HIGH),
        subject_id=p.subject_id, summary=p.summary, options=list(p.options),
        timeout_seconds=p.timeout_seconds, details_json=p.details_json,
        policy_explanation=p.policy_explanation,
    )
