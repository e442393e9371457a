"""Tool calls: proposal → policy → (approval) → execute or deny → result.

A tool with side effects runs only after a journaled allow: a policy allow in
the same append as its proposal, a cached session/timeboxed grant answered on
the tape, or an approval whose decision was committed before execution. An
approved read-only call runs before its decision is durable, and the decision
and the result are one append (``_runs_with_its_decision``). A
read-only tool the policy allows outright runs first and is journaled with its
proposal (which carries the decision) and result (which carries the attestation)
in one append (one commit per step): if the
daemon dies in between, nothing of the step is on the tape, the model is asked
again and the harmless call re-runs — the same rule recovery already applies
to a read-only call caught in flight. Calls of one turn are
resolved strictly in the order the model asked for them, so results are fed
back in that order. The turn's leading read-only calls the policy allows
outright run concurrently (``EngineConfig.parallel_read_only_tools``), their
proposals and results one append in the model's order, whichever finished first;
a crash in the middle leaves none of them on the tape, and the model asks again.

A tool runs only with the exact arguments the model asked for. After a restart
the arguments come from the tape, where the journal redacted any secret; such
a call (``Proposal.args_redacted``) is refused with a denial result instead of
running with ``<redacted>`` in place of the secret.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec
from palyra_gen.palyra import v1 as pb

from palyra.core.canonical import canonical_json
from palyra.core.eager import Suspended, first_step, resume
from palyra.core.errors import ErrorCode, PalyraError, PalyraInternalError
from palyra.core.ids import new_ulid
from palyra.engine.model import approvals as appr
from palyra.engine.model.approvals import Decision
from palyra.engine.model.errors import RunFailed
from palyra.engine.model.fold import Proposal, ProposalPhase
from palyra.engine.model.lifecycle import (
    ApprovalEvent,
    ApprovalStateId,
    RunEvent,
    approval_state_proto,
)
from palyra.engine.model.ports import ReferenceCall, ToolOutcome, ToolRequest, ToolVerdict
from palyra.engine.model.records import GrantRec, grant_key, redacted
from palyra.engine.run import relay
from palyra.engine.run.approvals import approval_write, stored_approval_write
from palyra.engine.run.relay import RELAY_POLL_S, clear_relay, read_relayed
from palyra.engine.run.step import Step
from palyra.engine.run.writer import Batch
from palyra.engine.sessions.plan import record_write
from palyra.providers import ToolCall

log = logging.getLogger("palyra.engine")
_ALLOW = pb.ToolDecisionOutcome.ALLOW
_ASK = pb.ToolDecisionOutcome.NEEDS_APPROVAL

REDACTED_ARGS = ("its arguments held a secret that was redacted before they were journaled, "
                 "and after the daemon restart the exact arguments are gone; the call was not "
                 "run (propose it again)")


def decide(step: Step, name: str, arguments: Mapping[str, Any],
           earlier_in_turn: int = 0) -> ToolVerdict:
    """The policy verdict for one call; gate errors deny (unknown tools: the gate denies)."""
    deps = step.deps
    rec = step.record
    try:
        return deps.policy.decide_tool(ToolRequest(
            identity=rec.identity, session_id=rec.session_id, run_id=rec.run_id,
            tool_name=name, arguments=arguments, postures=run_postures(step),
            calls_made=step.writer.loop.tool_call_count + earlier_in_turn))
    except PalyraError as exc:  # default deny: a gate error never allows
        return ToolVerdict(pb.ToolDecisionOutcome.DENY, f"policy error: {exc.message}",
                           deps.policy.policy_hash)


def tool_decision(pid: str, verdict: ToolVerdict) -> pb.ToolDecision:
    """The tape's record of a verdict (the posture travels: the call runs under it)."""
    return pb.ToolDecision(proposal_id=pid, outcome=verdict.outcome, reason=verdict.reason,
                           policy_hash=verdict.policy_hash, policy_ids=list(verdict.policy_ids),
                           posture=verdict.posture)


async def propose(step: Step, batch: Batch, calls: Sequence[ToolCall], turn: int) -> None:
    """Tape the proposals and their decisions with the provider output, then commit.

    If the first call needs approval, its request is part of the same append.
    """
    verdicts: list[tuple[str, ToolCall, ToolVerdict]] = []
    inputs: dict[str, str] = {}  # the canonical JSON of each call's arguments, by proposal
    limit = step.deps.config.max_tool_args_bytes
    for index, call in enumerate(calls):
        pid = new_ulid()
        input_json = canonical_json(dict(call.arguments)).decode()
        size = len(input_json) if input_json.isascii() else len(input_json.encode())
        if size > limit:
            # Taped as a placeholder and denied: the run and its input stay on
            # the tape, and the model hears why instead of the run failing.
            verdict = ToolVerdict(pb.ToolDecisionOutcome.DENY,
                                  f"tool arguments are {size} bytes, over "
                                  f"the {limit}-byte limit", step.deps.policy.policy_hash)
            input_json = oversized_args_json(input_json)
        else:
            verdict = decide(step, call.name, call.arguments, index)
            # The fold takes these arguments rather than decoding ``input_json`` again.
            step.writer.loop.expect_arguments(pid, dict(call.arguments))
            inputs[pid] = input_json
        verdicts.append((pid, call, verdict))
        # One event: the call and the policy's verdict on it (docs/journal/design.md, "Tape events folded").
        batch.add(pb.ToolProposal(
            proposal_id=pid, tool_name=call.name, input_json=input_json,
            approval_required=verdict.outcome == _ASK, turn=turn,
            decision=tool_decision(pid, verdict)))
    group = _read_only_group(step, verdicts)
    if group:
        # Intent and results in one commit; the batch stays carried while the
        # tools run, so an abort still journals the proposals with the cancel.
        step.carry(batch)
        step.phase = "tool"
        with step.active():
            outcomes = await _run_group(step, group, inputs)
        for (gpid, gcall, _), outcome in zip(group, outcomes, strict=True):
            _add_outcome(batch, gpid, gcall.name, outcome)  # the model's order, always
        if len(group) == len(calls):
            batch.add(pb.AgentLoop(phase=pb.AgentLoopPhase.TURN_COMPLETED, turn=turn))
        step.carry(None)
        await batch.commit()
        return
    pid, call, verdict = verdicts[0]
    step.carry(None)
    if verdict.outcome == _ASK:
        await approval_gate(step, batch, pid, call.name, call.arguments, verdict)
    else:
        await batch.commit()


def _read_only_group(step: Step, verdicts: list[tuple[str, ToolCall, ToolVerdict]]
                     ) -> list[tuple[str, ToolCall, ToolVerdict]]:
    """The turn's leading calls that are read-only and allowed outright (at most
    ``parallel_read_only_tools``): they run together. The first call needing an
    approval or having side effects ends the group; it and every later call are
    resolved one by one, as before."""
    limit = max(1, step.deps.config.parallel_read_only_tools)
    group: list[tuple[str, ToolCall, ToolVerdict]] = []
    for entry in verdicts[:limit]:
        _, call, verdict = entry
        if verdict.outcome != _ALLOW or not step.deps.tools.is_read_only(call.name):
            break
        group.append(entry)
    return group


async def _run_group(step: Step, group: list[tuple[str, ToolCall, ToolVerdict]],
                     inputs: Mapping[str, str]) -> list[ToolOutcome]:
    """Run the group's calls concurrently; outcomes in the group's order. ``inputs``: each
    call's ``input_json`` by proposal id (its attestation hashes that same text)."""
    if len(group) == 1:  # the common case: no extra tasks
        pid, call, _ = group[0]
        return [await _run_tool(step, call.name, call.arguments, args_json=inputs[pid])]
    return list(await asyncio.gather(*(_run_tool(step, call.name, call.arguments,
                                                 args_json=inputs[pid])
                                       for pid, call, _ in group)))


def run_postures(step: Step) -> dict[str, str]:
    """The postures the run's tool calls are decided under: the agent's, then the
    session's overrides on top (configured postures belong to the policy gate's
    config, which applies them below these)."""
    session = step.deps.session_reader.get(step.record.session_id)
    return {**step.record.agent_postures, **(session.tool_postures if session else {})}


async def propose_references(step: Step, batch: Batch, calls: Sequence[ReferenceCall],
                             turn: int) -> None:
    """Tape the daemon's own calls for context references whose tool needs an approval,
    with the input that named them, and park on the first like any tool call.

    Each proposal carries ``context_reference``: the fold feeds its result to the
    model as a context block, and the model is called once every one has a result.
    """
    first: tuple[str, ReferenceCall, ToolVerdict] | None = None
    for call in calls:
        pid = new_ulid()
        verdict = decide(step, call.tool_name, call.arguments)
        batch.add(pb.ToolProposal(
            proposal_id=pid, tool_name=call.tool_name,
            input_json=canonical_json(dict(call.arguments)).decode(),
            approval_required=verdict.outcome == _ASK, turn=turn, context_reference=call.label,
            decision=tool_decision(pid, verdict)))
        first = first or (pid, call, verdict)
    assert first is not None
    pid, call, verdict = first
    if verdict.outcome == _ASK:
        await approval_gate(step, batch, pid, call.tool_name, call.arguments, verdict)
    else:  # the policy changed its mind since assembly: the loop resolves it next
        await batch.commit()


async def resolve_tool(step: Step, p: Proposal) -> None:
    """Advance the first unfinished call of the turn by one committed step."""
    if p.args_redacted and p.phase in (ProposalPhase.PROPOSED, ProposalPhase.NEEDS_APPROVAL):
        # No human is asked to approve a call that cannot run as proposed.
        await _refuse_redacted(step, p)
    elif p.phase is ProposalPhase.PROPOSED:  # only after an interrupted append
        verdict = decide(step, p.tool_name, p.arguments())
        await step.writer.batch().add(tool_decision(p.proposal_id, verdict)).commit()
    elif p.phase is ProposalPhase.NEEDS_APPROVAL:
        verdict = decide(step, p.tool_name, p.arguments())
        await approval_gate(step, step.writer.batch(), p.proposal_id, p.tool_name,
                            p.arguments(), verdict)
    elif p.phase is ProposalPhase.WAITING:
        await await_decision(step, p)
    elif p.phase is ProposalPhase.DENIED:
        batch = step.writer.batch()
        _add_denial(step, batch, p.proposal_id, p.tool_name, p.deny_reason)
        await batch.commit()
    elif p.phase is ProposalPhase.ALLOWED:
        await execute(step, p)
    else:
        raise PalyraInternalError(f"proposal {p.proposal_id} has nothing left to do")


def _is_last(step: Step, proposal_id: str) -> bool:
    props = step.writer.loop.proposals
    return bool(props) and props[-1].proposal_id == proposal_id


def _turn_done(step: Step, batch: Batch, proposal_id: str) -> None:
    if _is_last(step, proposal_id):
        batch.add(pb.AgentLoop(phase=pb.AgentLoopPhase.TURN_COMPLETED,
                               turn=step.writer.loop.turn_count))


async def _refuse_redacted(step: Step, p: Proposal) -> None:
    log.warning("refusing tool %s: its arguments were redacted in the journal", p.tool_name,
                extra={"run_id": step.run_id, "proposal_id": p.proposal_id})
    batch = step.writer.batch()
    _add_denial(step, batch, p.proposal_id, p.tool_name, REDACTED_ARGS)
    await batch.commit()


def _add_denial(step: Step, batch: Batch, pid: str, name: str, reason: str) -> None:
    batch.add(pb.ToolResult(proposal_id=pid, tool_name=name, success=False,
                            error=f"denied: {reason or 'not allowed'}"))
    _turn_done(step, batch, pid)


async def approval_gate(step: Step, batch: Batch, pid: str, name: str,
                        arguments: Mapping[str, Any], verdict: ToolVerdict) -> None:
    """Answer from a cached grant, or create a durable approval and park the run.

    The session's lock is taken only when the session holds a grant for this
    exact call: asking writes nothing to the session, and a grant another run
    commits meanwhile is missed only as it would be had this call come a moment
    earlier (a human is asked). Using or expiring a grant stays under the lock.
    """
    deps, rec = step.deps, step.record
    digest = deps.tools.args_digest(name, arguments)
    key = grant_key(name, digest)
    if key not in deps.session_reader.require(rec.session_id).grants:
        await _ask(step, batch, pid, name, arguments, verdict, digest)
        return
    async with deps.session_writer.hold(rec.session_id):
        session = deps.session_reader.require(rec.session_id)
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
            old = deps.approval_reader.get(grant.approval_id)
            if old is not None and old.state == ApprovalStateId.APPROVED:
                batch.write(approval_write(appr.transitioned(old, ApprovalEvent.EXPIRE, "grant ttl elapsed")))
        await _ask(step, batch, pid, name, arguments, verdict, digest)


async def _ask(step: Step, batch: Batch, pid: str, name: str, arguments: Mapping[str, Any],
               verdict: ToolVerdict, digest: str) -> None:
    """Create the approval bound to this exact call and park the run, in one commit."""
    deps, rec = step.deps, step.record
    record = appr.new_record(
        session_id=rec.session_id, run_id=rec.run_id, proposal_id=pid, tool_name=name,
        arguments=arguments, args_digest=digest, policy_hash=verdict.policy_hash,
        risk_level=verdict.risk_level, policy_explanation=verdict.reason,
        requested_by=rec.identity, now_ms=deps.now_ms(), timeout_s=deps.config.approval_timeout_s)
    stored = redacted(record)  # the row's form, redacted once
    step.mailbox.expect(record.approval_id)
    # The event carries the prompt as asked: the journal redacts it and records where.
    batch.add(pb.ToolApprovalRequest(
        approval_id=record.approval_id, proposal_id=pid, tool_name=name,
        args_digest=digest, prompt=appr.prompt_proto(record.prompt),
        expires_at_unix_ms=record.expires_at_ms))
    batch.transition(RunEvent.REQUEST_APPROVAL, message=f"waiting for approval {record.approval_id}",
                     reason="approval_required")
    batch.write(stored_approval_write(stored)).set(pending_approval_id=record.approval_id)
    # Held from the hand-over on: the request reaches a decider only through the
    # committed tape event, often before this task resumes (see PendingApprovals).
    deps.pending.add(stored)
    try:
        await batch.commit()
    except BaseException:
        deps.pending.discard(record.approval_id)  # the store decides what is true
        raise


def _add_denial_after_response(batch: Batch, pid: str, name: str, reason: str) -> None:
    batch.add(pb.ToolResult(proposal_id=pid, tool_name=name, success=False,
                            error=f"denied: {reason}"))


async def await_decision(step: Step, p: Proposal) -> None:
    """Wait (durably parked) for a decision or the timeout, then record it.

    A decision relayed by another daemon is recorded only while its relay row is as
    relayed (``run.relay``): when its decider gave up first, the commit is refused,
    nothing of it is written, and the run waits on the approval again.
    """
    while True:
        try:
            await _await_decision_once(step, p)
            return
        except PalyraError as exc:
            if not relay.withdrawn(p.approval_id, exc):
                raise
        step.mailbox.retract(p.approval_id)  # the withdrawn decision is forgotten


async def _await_decision_once(step: Step, p: Proposal) -> None:
    deps = step.deps
    record = deps.pending.get(p.approval_id)
    if record is None:  # resumed after a restart: the store has it
        record = deps.approval_reader.get(p.approval_id)
        if record is None:
            raise PalyraInternalError(f"approval {p.approval_id} of a waiting run is missing")
        if record.state == ApprovalStateId.PENDING:
            deps.pending.add(record)
    fut = step.mailbox.expect(record.approval_id)
    step.phase = "approval"
    remaining = (record.expires_at_ms - deps.now_ms()) / 1000
    relayed: relay.Relayed | None = None
    if not fut.done() and remaining > 0:
        if deps.shared_journal:
            relayed = await _wait_or_relayed(step, record.approval_id, fut, remaining)
        else:
            await _decision_within(fut, remaining, deps.now_ms)
    if not fut.done():
        fut.set_result(_timed_out(deps.now_ms()))
    decision = fut.result()
    deps.pending.discard(record.approval_id)  # its row changes in the commit below
    new = appr.decided(record, decision)
    # The row's form (a decider's reason may quote a secret), redacted once: written,
    # and the decider's answer. The tape event below carries the reason as given:
    # the journal redacts it and records where.
    stored = redacted(new)
    approved = decision.event == ApprovalEvent.APPROVE
    batch = step.writer.batch()
    batch.add(pb.ToolApprovalResponse(
        approval_id=new.approval_id, proposal_id=p.proposal_id, approved=approved,
        scope=appr.SCOPE_PROTO.get(new.scope, pb.ApprovalScope.UNSPECIFIED),
        ttl_seconds=new.ttl_seconds, decided_by=new.decided_by, reason=new.reason,
        state=approval_state_proto(new.state)))
    batch.transition(RunEvent.APPROVAL_RESOLVED, message=f"approval {new.state}", reason=new.state)
    batch.write(stored_approval_write(stored)).set(pending_approval_id="")
    if deps.shared_journal:
        batch.write(clear_relay(new.approval_id))  # a relayed decision is consumed
        if relayed is not None:  # ... only while its decider still waits for it
            batch.expecting(relayed.consumed)
    if not approved:
        _add_denial_after_response(batch, p.proposal_id, p.tool_name,
                                   "approval timed out" if decision.event == ApprovalEvent.TIME_OUT
                                   else (new.reason or "approval denied"))
        _turn_done(step, batch, p.proposal_id)
    # The decider is answered once the decision is durable, not after the run's next step.
    batch.on_landed(lambda: step.mailbox.resolve(stored))
    if approved and new.scope == "once" and _runs_with_its_decision(step, p):
        await _execute_with(step, batch, p)
        return
    if decision.event != ApprovalEvent.TIME_OUT and new.scope in ("session", "timeboxed"):
        async with deps.session_writer.hold(new.session_id):
            session = deps.session_reader.require(new.session_id)
            expires = (decision.decided_at_ms + new.ttl_seconds * 1000
                       if new.scope == "timeboxed" else 0)
            grant = GrantRec(new.approval_id, new.tool_name, new.args_digest, approved,
                             new.scope, expires, new.decided_by)
            grants = {**session.grants, grant_key(new.tool_name, new.args_digest): grant}
            batch.write(record_write(msgspec.structs.replace(session, grants=grants)))
            await batch.commit()
    else:
        await batch.commit()


def _runs_with_its_decision(step: Step, p: Proposal) -> bool:
    """An approved call whose decision may share its result's append: a read-only tool
    (as the parallel group's calls, nothing sensitive) that can run as proposed.

    Such a call runs before its decision is durable, so the decision, the approved
    row and the result with its attestation are one commit, and the decider is
    answered when it lands. A crash before then loses a decision nobody was told
    was recorded: after the restart the approval is still pending, asked again,
    and the harmless call runs again once decided, as recovery re-runs a read-only
    call caught in flight. A call with side effects keeps its own decision commit
    before it runs, and so does a session or timeboxed grant (its session row is
    written under the session's lock, which a tool's run must not hold).
    """
    return not p.args_redacted and step.deps.tools.is_read_only(p.tool_name)


async def _execute_with(step: Step, batch: Batch, p: Proposal) -> None:
    """Run the approved read-only call and commit its result in ``batch``, which holds
    its decision. Nothing is carried while the tool runs: a run stopped meanwhile
    (cancel, park) ends without the decision, whose decider is told it was not
    recorded (``ApprovalMailbox.close``), and a cancel marks the approval cancelled.

    The decider waits for the call only up to ``EngineConfig.decision_ride_s`` (the
    fast calls of an agent's loop finish well within it): a slower call
    (a fetch, a search) has its decision committed alone then, the decider answered,
    and its result committed after it as any approved call's, so approving never
    hangs on a tool. A call that suspends in its first step is a task this coroutine
    owns: awaited, or cancelled with it.
    """
    step.phase = "tool"
    with step.active():
        # Most approved read-only calls finish in their first step (``add``, a file read):
        # run here, they need no task, no timer and no loop turn. Only a call that
        # suspends is continued in a task of its own, which the decider waits for.
        # Attested from the taped call's text, as the proposal's own run is (``propose``).
        first = first_step(_run_tool(step, p.tool_name, p.arguments(), p.posture,
                                     args_json=p.input_json))
        if isinstance(first, Suspended):
            call = asyncio.ensure_future(_resumed(first))
            try:
                done, _ = await asyncio.wait({call}, timeout=step.deps.config.decision_ride_s)
                if not done:
                    await batch.commit()  # the decision alone; recovery re-runs the call
                    batch = step.writer.batch()
                outcome = await call
            finally:
                call.cancel()  # a no-op once it is done
        else:
            outcome = first
    _add_outcome(batch, p.proposal_id, p.tool_name, outcome)
    _turn_done(step, batch, p.proposal_id)
    await batch.commit()


async def _resumed(suspended: Suspended) -> ToolOutcome:
    """The rest of a tool call that suspended in its first step (see ``core.eager``)."""
    outcome: ToolOutcome = await resume(suspended)
    return outcome


async def _decision_within(fut: asyncio.Future[Decision], wait_s: float,
                           now_ms: Callable[[], int]) -> None:
    """Wait up to ``wait_s`` for the decision ``fut``; on time, the timeout is its decision.

    ``fut`` is awaited itself, under one timer: a delivered decision wakes the run in
    the next loop turn (``asyncio.wait`` took a waiter future, a callback and a turn
    more). Cancelling the run's work cancels ``fut`` with it; a decision delivered
    before the run then stops is taken on a fresh one (``ApprovalMailbox.expect``).
    """
    timer = fut.get_loop().call_later(wait_s, _time_out, fut, now_ms)
    try:
        await fut
    finally:
        timer.cancel()


def _time_out(fut: asyncio.Future[Decision], now_ms: Callable[[], int]) -> None:
    if not fut.done():
        fut.set_result(_timed_out(now_ms()))


def _timed_out(now_ms: int) -> Decision:
    return Decision(ApprovalEvent.TIME_OUT, "", 0, "approval timed out", "system:timeout", now_ms)


async def _wait_or_relayed(step: Step, approval_id: str, fut: asyncio.Future[Decision],
                           wait_s: float) -> relay.Relayed | None:
    """Wait for a local decision, looking every ``RELAY_POLL_S`` for one relayed by
    another daemon through the journal (``run.relay``); the relayed one if it is the
    decision."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while not fut.done() and (left := deadline - loop.time()) > 0:
        await asyncio.wait({fut}, timeout=min(left, RELAY_POLL_S))
        if not fut.done() and (relayed := read_relayed(step.deps.store, approval_id,
                                                        step.deps.now_ms())):
            fut.set_result(relayed.decision)
            return relayed
    return None


async def execute(step: Step, p: Proposal) -> None:
    """Run an allowed tool and tape its result and attestation."""
    deps = step.deps
    if step.was_in_flight(p.proposal_id) and not deps.tools.may_rerun(p.tool_name):
        raise RunFailed("daemon_restarted", PalyraError(
            f"tool {p.tool_name} was in flight when the daemon stopped; it is neither "
            "read-only nor idempotent, so it is not run again", code=ErrorCode.UNAVAILABLE))
    if p.args_redacted:  # the one place tools run: never with a placeholder for a secret
        await _refuse_redacted(step, p)
        return
    step.phase = "tool"
    with step.active():
        outcome = await _run_tool(step, p.tool_name, p.arguments(), p.posture,
                                  args_json=p.input_json)
    batch = step.writer.batch()
    _add_outcome(batch, p.proposal_id, p.tool_name, outcome)
    _turn_done(step, batch, p.proposal_id)
    await batch.commit()


def _add_outcome(batch: Batch, pid: str, name: str, outcome: ToolOutcome) -> None:
    attestation = pb.ToolAttestation(
        proposal_id=pid, execution_sha256=outcome.execution_sha256, executor=outcome.executor,
        timed_out=outcome.timed_out, facts=dict(outcome.facts)) if outcome.execution_sha256 else None
    batch.add(pb.ToolResult(
        proposal_id=pid, tool_name=name, success=outcome.success,
        output_json=outcome.output_json, error=outcome.error, timed_out=outcome.timed_out,
        truncated=outcome.truncated, attestation=attestation,
        attachments=[pb.AttachmentRef(sha256=rec.sha256, mime_type=rec.mime_type,
                                      width=rec.width, height=rec.height,
                                      size_bytes=rec.size_bytes, name=rec.name)
                     for rec, _data in outcome.images]))


async def _run_tool(step: Step, name: str, arguments: Mapping[str, Any],
                    posture: str = "", *, args_json: str = "") -> ToolOutcome:
    """Execute within the loop's remaining wall-clock budget; every failure is an outcome.

    The tools port enforces the budget (``timeout_s``) with the one timer it sets
    for the tool's own limit anyway: a second timer here would cost every step.
    """
    remaining = step.remaining_wall_s()
    try:
        if remaining <= 0:
            raise TimeoutError
        outcome = await step.deps.tools.execute(
            name, arguments, session_id=step.record.session_id,
            run_id=step.run_id, timeout_s=remaining, posture=posture, args_json=args_json)
        if outcome.images:
            # Stored (with the run's references) before the result that names them.
            await step.deps.attachments.put(step.record.identity.principal, step.run_id,
                                            [(rec.sha256, data) for rec, data in outcome.images])
        return outcome
    except TimeoutError:
        return ToolOutcome(False, "", "the agent loop's wall-clock limit was reached",
                           timed_out=True)
    except PalyraError as exc:
        return ToolOutcome(False, "", exc.message)
    except Exception as exc:  # a tool bug is the model's problem to hear about, not a crash
        log.exception("tool %s raised", name)
        return ToolOutcome(False, "", f"{type(exc).__name__}: {exc}")


def oversized_args_json(input_json: str) -> str:
    """What a proposal whose arguments are too large keeps of them: size and digest."""
    digest = hashlib.sha256(input_json.encode()).hexdigest()
    return canonical_json({"_omitted": "arguments over the size limit",
                           "bytes": len(input_json.encode()), "sha256": digest}).decode()
