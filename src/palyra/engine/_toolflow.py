"""Tool calls: proposal → policy → (approval) → execute or deny → result.

A tool runs only after a journaled allow: a policy allow in the same append
as its proposal, a cached session/timeboxed grant answered on the tape, or an
approval whose decision was committed before execution. Calls of one turn are
resolved strictly in the order the model asked for them, so results are fed
back in that order.

A tool runs only with the exact arguments the model asked for. After a restart
the arguments come from the tape, where the journal redacted any secret; such
a call (``Proposal.args_redacted``) is refused with a denial result instead of
running with ``<redacted>`` in place of the secret.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
from palyra_gen.palyra import v1 as pb

from palyra.core.errors import ErrorCode, PalyraError, PalyraInternalError
from palyra.core.ids import new_ulid
from palyra.engine import _approvals as appr
from palyra.engine._approvals import Decision
from palyra.engine._failures import RunFailed
from palyra.engine._loopstate import Proposal, ProposalPhase
from palyra.engine._machines import approval_state_proto
from palyra.engine._ports import ToolOutcome, ToolRequest, ToolVerdict
from palyra.engine._records import GrantRec, grant_key
from palyra.engine._sessions import record_write
from palyra.engine._writer import Batch
from palyra.providers import ToolCall

if TYPE_CHECKING:
    from palyra.engine._actor import RunActor

log = logging.getLogger("palyra.engine")
_OUTCOMES = {"allow": pb.ToolDecisionOutcome.ALLOW, "deny": pb.ToolDecisionOutcome.DENY,
             "needs_approval": pb.ToolDecisionOutcome.NEEDS_APPROVAL}


_CANONICAL = msgspec.json.Encoder(order="sorted")
REDACTED_ARGS = ("its arguments held a secret that was redacted before they were journaled, "
                 "and after the daemon restart the exact arguments are gone; the call was not "
                 "run (propose it again)")


def _args_json(arguments: Mapping[str, Any]) -> str:
    # Sorted keys, no whitespace: the same bytes the tools package attests.
    return _CANONICAL.encode(dict(arguments)).decode()


def decide(actor: RunActor, name: str, arguments: Mapping[str, Any],
           earlier_in_turn: int = 0) -> ToolVerdict:
    """The policy verdict for one call; gate errors deny (unknown tools: the gate denies)."""
    deps = actor.deps
    rec = actor.record
    session = deps.sessions.get(rec.session_id)
    # Only the session's overrides: configured postures belong to the policy
    # gate's config, which applies them below these.
    postures = dict(session.tool_postures) if session else {}
    try:
        return deps.policy.decide_tool(ToolRequest(
            identity=rec.identity, session_id=rec.session_id, run_id=rec.run_id,
            tool_name=name, arguments=arguments, postures=postures,
            calls_made=actor.writer.loop.tool_call_count + earlier_in_turn))
    except PalyraError as exc:  # default deny: a gate error never allows
        return ToolVerdict("deny", f"policy error: {exc.message}", deps.policy.policy_hash)


async def propose(actor: RunActor, batch: Batch, calls: Sequence[ToolCall], turn: int) -> None:
    """Tape the proposals and their decisions with the provider output, then commit.

    If the first call needs approval, its request is part of the same append.
    """
    verdicts: list[tuple[str, ToolCall, ToolVerdict]] = []
    for index, call in enumerate(calls):
        pid = new_ulid()
        verdict = decide(actor, call.name, call.arguments, index)
        verdicts.append((pid, call, verdict))
        batch.add(
            pb.ToolProposal(proposal_id=pid, tool_name=call.name,
                            input_json=_args_json(call.arguments),
                            approval_required=verdict.outcome == "needs_approval", turn=turn),
            pb.ToolDecision(proposal_id=pid, outcome=_OUTCOMES[verdict.outcome],
                            reason=verdict.reason, policy_hash=verdict.policy_hash,
                            policy_ids=list(verdict.policy_ids)),
        )
    pid, call, verdict = verdicts[0]
    actor.carry = None
    if verdict.outcome == "needs_approval":
        await approval_gate(actor, batch, pid, call.name, call.arguments, verdict)
    else:
        await batch.commit()


async def resolve_tool(actor: RunActor, p: Proposal) -> None:
    """Advance the first unfinished call of the turn by one committed step."""
    if p.args_redacted and p.phase in (ProposalPhase.PROPOSED, ProposalPhase.NEEDS_APPROVAL):
        # No human is asked to approve a call that cannot run as proposed.
        await _refuse_redacted(actor, p)
    elif p.phase is ProposalPhase.PROPOSED:  # only after an interrupted append
        verdict = decide(actor, p.tool_name, p.arguments())
        await actor.writer.batch().add(pb.ToolDecision(
            proposal_id=p.proposal_id, outcome=_OUTCOMES[verdict.outcome], reason=verdict.reason,
            policy_hash=verdict.policy_hash, policy_ids=list(verdict.policy_ids))).commit()
    elif p.phase is ProposalPhase.NEEDS_APPROVAL:
        verdict = decide(actor, p.tool_name, p.arguments())
        await approval_gate(actor, actor.writer.batch(), p.proposal_id, p.tool_name,
                            p.arguments(), verdict)
    elif p.phase is ProposalPhase.WAITING:
        await await_decision(actor, p)
    elif p.phase is ProposalPhase.DENIED:
        batch = actor.writer.batch()
        _add_denial(actor, batch, p.proposal_id, p.tool_name, p.deny_reason)
        await batch.commit()
    elif p.phase is ProposalPhase.ALLOWED:
        await execute(actor, p)
    else:
        raise PalyraInternalError(f"proposal {p.proposal_id} has nothing left to do")


def _is_last(actor: RunActor, proposal_id: str) -> bool:
    props = actor.writer.loop.proposals
    return bool(props) and props[-1].proposal_id == proposal_id


def _turn_done(actor: RunActor, batch: Batch, proposal_id: str) -> None:
    if _is_last(actor, proposal_id):
        batch.add(pb.AgentLoop(phase=pb.AgentLoopPhase.TURN_COMPLETED,
                               turn=actor.writer.loop.turn_count))


async def _refuse_redacted(actor: RunActor, p: Proposal) -> None:
    log.warning("refusing tool %s: its arguments were redacted in the journal", p.tool_name,
                extra={"run_id": actor.run_id, "proposal_id": p.proposal_id})
    batch = actor.writer.batch()
    _add_denial(actor, batch, p.proposal_id, p.tool_name, REDACTED_ARGS)
    await batch.commit()


def _add_denial(actor: RunActor, batch: Batch, pid: str, name: str, reason: str) -> None:
    batch.add(pb.ToolResult(proposal_id=pid, tool_name=name, success=False,
                            error=f"denied: {reason or 'not allowed'}"))
    _turn_done(actor, batch, pid)


async def approval_gate(actor: RunActor, batch: Batch, pid: str, name: str,
                        arguments: Mapping[str, Any], verdict: ToolVerdict) -> None:
    """Answer from a cached grant, or create a durable approval and park the run."""
    deps, rec = actor.deps, actor.record
    digest = deps.tools.args_digest(name, arguments)
    async with deps.sessions.locks.hold("sid:" + rec.session_id):
        session = deps.sessions.require(rec.session_id)
        key = grant_key(name, digest)
        grant = session.grants.get(key)
        now = deps.now_ms()
        if grant is not None and (grant.expires_at_ms == 0 or grant.expires_at_ms > now):
            batch.add(pb.ToolApprovalResponse(
                approval_id=grant.approval_id, proposal_id=pid, approved=grant.approved,
                scope=appr.SCOPE_PROTO.get(grant.scope, pb.ApprovalScope.UNSPECIFIED),
                ttl_seconds=max(0, (grant.expires_at_ms - now) // 1000) if grant.expires_at_ms
                else 0, decided_by=grant.decided_by, reason="cached decision",
                state=pb.ApprovalState.APPROVED if grant.approved else pb.ApprovalState.DENIED,
                from_cache=True))
            if not grant.approved:
                # Appended after the response in the same commit; on fold the
                # proposal is DENIED, then DONE.
                _add_denial_after_response(batch, pid, name, "denied by a cached decision")
            await batch.commit()
            return
        if grant is not None:  # a timeboxed grant ran out: forget it, ask again
            grants = {k: v for k, v in session.grants.items() if k != key}
            batch.write(record_write(msgspec.structs.replace(session, grants=grants)))
            old = deps.approvals.get(grant.approval_id)
            if old is not None and old.state == "approved":
                batch.write(appr.write(appr.transitioned(old, "expire", "grant ttl elapsed")))
        record = appr.new_record(
            session_id=rec.session_id, run_id=rec.run_id, proposal_id=pid, tool_name=name,
            arguments=arguments, args_digest=digest, policy_hash=verdict.policy_hash,
            risk_level=verdict.risk_level, policy_explanation=verdict.reason,
            requested_by=rec.identity, now_ms=now, timeout_s=deps.config.approval_timeout_s)
        actor.expect_decision(record.approval_id)
        batch.add(pb.ToolApprovalRequest(
            approval_id=record.approval_id, proposal_id=pid, tool_name=name,
            args_digest=digest, prompt=appr.prompt_proto(record.prompt),
            expires_at_unix_ms=record.expires_at_ms))
        batch.transition("request_approval", message=f"waiting for approval {record.approval_id}",
                         reason="approval_required")
        batch.write(appr.write(record)).set(pending_approval_id=record.approval_id)
        await batch.commit()


def _add_denial_after_response(batch: Batch, pid: str, name: str, reason: str) -> None:
    batch.add(pb.ToolResult(proposal_id=pid, tool_name=name, success=False,
                            error=f"denied: {reason}"))


async def await_decision(actor: RunActor, p: Proposal) -> None:
    """Wait (durably parked) for a decision or the timeout, then record it."""
    deps = actor.deps
    record = deps.approvals.get(p.approval_id)
    if record is None:
        raise PalyraInternalError(f"approval {p.approval_id} of a waiting run is missing")
    fut = actor.expect_decision(record.approval_id)
    actor.phase = "approval"
    remaining = (record.expires_at_ms - deps.now_ms()) / 1000
    if not fut.done() and remaining > 0:
        await asyncio.wait({fut}, timeout=remaining)
    if not fut.done():
        fut.set_result(Decision("time_out", "", 0, "approval timed out", "system:timeout",
                                deps.now_ms()))
    decision = fut.result()
    new = appr.decided(record, decision)
    approved = decision.event == "approve"
    batch = actor.writer.batch()
    batch.add(pb.ToolApprovalResponse(
        approval_id=new.approval_id, proposal_id=p.proposal_id, approved=approved,
        scope=appr.SCOPE_PROTO.get(new.scope, pb.ApprovalScope.UNSPECIFIED),
        ttl_seconds=new.ttl_seconds, decided_by=new.decided_by, reason=new.reason,
        state=approval_state_proto(new.state)))
    batch.transition("approval_resolved", message=f"approval {new.state}", reason=new.state)
    batch.write(appr.write(new)).set(pending_approval_id="")
    if not approved:
        _add_denial_after_response(batch, p.proposal_id, p.tool_name,
                                   "approval timed out" if decision.event == "time_out"
                                   else (new.reason or "approval denied"))
        _turn_done(actor, batch, p.proposal_id)
    if decision.event != "time_out" and new.scope in ("session", "timeboxed"):
        async with deps.sessions.locks.hold("sid:" + new.session_id):
            session = deps.sessions.require(new.session_id)
            expires = (decision.decided_at_ms + new.ttl_seconds * 1000
                       if new.scope == "timeboxed" else 0)
            grant = GrantRec(new.approval_id, new.tool_name, new.args_digest, approved,
                             new.scope, expires, new.decided_by)
            grants = {**session.grants, grant_key(new.tool_name, new.args_digest): grant}
            batch.write(record_write(msgspec.structs.replace(session, grants=grants)))
            await batch.commit()
    else:
        await batch.commit()
    actor.decisions.pop(new.approval_id, None)
    ack = actor.acks.pop(new.approval_id, None)
    if ack is not None and not ack.done():
        ack.set_result(new)


async def execute(actor: RunActor, p: Proposal) -> None:
    """Run an allowed tool and tape its result and attestation."""
    deps = actor.deps
    if p.proposal_id in actor.unknown_inflight:
        actor.unknown_inflight.discard(p.proposal_id)
        if not deps.tools.is_read_only(p.tool_name):
            raise RunFailed("daemon_restarted", PalyraError(
                f"tool {p.tool_name} was in flight when the daemon stopped; it is not "
                "read-only, so it is not run again", code=ErrorCode.UNAVAILABLE))
    if p.args_redacted:  # the one place tools run: never with a placeholder for a secret
        await _refuse_redacted(actor, p)
        return
    actor.phase = "tool"
    started = time.monotonic()
    remaining = actor.remaining_wall_s()
    try:
        if remaining <= 0:
            raise TimeoutError
        async with asyncio.timeout(remaining):
            outcome = await deps.tools.execute(
                p.tool_name, p.arguments(), session_id=actor.record.session_id,
                run_id=actor.run_id, timeout_s=remaining)
    except TimeoutError:
        outcome = ToolOutcome(False, "", "the agent loop's wall-clock limit was reached",
                              timed_out=True)
    except PalyraError as exc:
        outcome = ToolOutcome(False, "", exc.message)
    except Exception as exc:  # a tool bug is the model's problem to hear about, not a crash
        log.exception("tool %s raised", p.tool_name)
        outcome = ToolOutcome(False, "", f"{type(exc).__name__}: {exc}")
    finally:
        actor.active_s += time.monotonic() - started
    batch = actor.writer.batch().add(pb.ToolResult(
        proposal_id=p.proposal_id, tool_name=p.tool_name, success=outcome.success,
        output_json=outcome.output_json, error=outcome.error, timed_out=outcome.timed_out,
        truncated=outcome.truncated))
    if outcome.execution_sha256:
        batch.add(pb.ToolAttestation(proposal_id=p.proposal_id,
                                     execution_sha256=outcome.execution_sha256,
                                     executor=outcome.executor, timed_out=outcome.timed_out))
    _turn_done(actor, batch, p.proposal_id)
    await batch.commit()
