"""The agent loop: input → model → tools → model … → final answer.

``advance`` runs in the actor's work task, over the run's :class:`Step`, and asks the tape-derived
``LoopState`` what to do next until the loop is idle, so the same code serves
a live run and one resumed after a restart. Commits are grouped by cause to
keep the journal honest and cheap: the input pickup, the turn start, the
tokens, the provider output and the tool proposals with their policy
decisions are one append (the decision is durable before the tool runs); each
tool result with its attestation is one append (a read-only call's shares the
append of its proposal, or of its approval's decision: ``run.toolflow``).
"""

from __future__ import annotations

import math
import time

from palyra_gen.palyra import v1 as pb

from palyra.core.errors import ErrorCode, PalyraError, PalyraInternalError
from palyra.engine.model.budgets import budget_exhausted
from palyra.engine.model.fold import Action, LoopState, images_of
from palyra.engine.model.ports import ContextRequest, ReferenceCall
from palyra.engine.model.prune import ESTIMATE, estimate_tokens, prune
from palyra.engine.model.tokens import TokenBuffer, clip_reply
from palyra.engine.run.compact import maybe_compact
from palyra.engine.run.modelcall import Routed, call_model
from palyra.engine.run.step import Step
from palyra.engine.run.toolflow import propose, propose_references, resolve_tool, run_postures
from palyra.engine.run.writer import Batch
from palyra.providers import Answered, ChatMessage, ModelRequest, TextDelta
from palyra.usage import Tally, UsageRow, cost_micros, day_of

_PHASE = pb.AgentLoopPhase


async def advance(step: Step) -> None:
    """Run the loop for every queued input until idle (or parking)."""
    while not step.parking:
        loop = step.writer.loop
        action, proposal = loop.next_action()
        if action is Action.IDLE:
            pending = step.record.pending_inputs
            if not pending:
                return
            first = pending[0]
            step.new_loop()
            # A new loop: an earlier loop's limit no longer says how the run ends.
            batch = step.writer.batch().take_input().set(end_reason="")
            batch.add(
                pb.UserInput(text=first.text, input_id=first.input_id,
                             attachment_count=first.attachment_count,
                             attachments=[pb.AttachmentRef(
                                 sha256=a.sha256, mime_type=a.mime_type, width=a.width,
                                 height=a.height, size_bytes=a.size_bytes, name=a.name)
                                 for a in first.attachments]),
                pb.AgentLoop(phase=_PHASE.STARTED, turn=loop.turn_count),
            )
            await model_turn(step, batch)
        elif action is Action.START_TURN:
            if loop.loop_turns >= step.deps.config.max_turns:
                await terminate(step, "turn_limit")
            elif step.remaining_wall_s() <= 0:
                await terminate(step, "wall_clock_limit")
            else:
                await model_turn(step, step.writer.batch())
        elif action is Action.RESOLVE_TOOL:
            assert proposal is not None
            await resolve_tool(step, proposal)
        else:  # COMPLETE_TURN: every call of the turn has its result
            await step.writer.batch().add(
                pb.AgentLoop(phase=_PHASE.TURN_COMPLETED, turn=loop.turn_count)).commit()


def limit_text(step: Step, reason: str) -> str:
    """The reply that tells the client why its loop stopped short."""
    config = step.deps.config
    if reason == "turn_limit":
        return f"stopped: turn limit ({config.max_turns}) reached"
    return f"stopped: wall-clock limit ({config.max_wall_s:g} s) reached"


async def terminate(step: Step, reason: str, batch: Batch | None = None) -> None:
    """End the agent loop early: ``turn_limit`` or ``wall_clock_limit``.

    A limit is not a failure, and it is never silent. The turn ends with a
    ``message_replied`` whose text says what stopped it ("stopped: turn limit
    (32) reached"), so a stream client gets an answer like any other and the
    run's ``final_text`` explains itself; ``agent_loop{TERMINATED}`` and the
    run's ``end_reason`` carry the machine-readable reason. The run stays
    ``in_progress``: more input may follow, and when the client completes it
    the run ends ``done`` with that ``end_reason`` (and the same reason on the
    ``done`` status) unless a later loop ended normally. Failing the run
    instead would throw away a conversation that is fine to continue.
    """
    batch = batch or step.writer.batch()
    batch.add(pb.MessageReplied(reply_text=limit_text(step, reason)),
              pb.AgentLoop(phase=_PHASE.TERMINATED, turn=step.writer.loop.turn_count,
                           reason=reason))
    batch.set(end_reason=reason)
    step.carry(None)
    await batch.complete_if_requested().commit()


async def model_turn(step: Step, batch: Batch) -> None:
    """One model call: stream tokens, then record the output and what it asks for."""
    deps, loop = step.deps, step.writer.loop
    turn = loop.turn_count + 1
    # By exact class (generated messages are never subclassed; an ABC isinstance per member).
    inputs = [m for m in batch.members if m.__class__ is pb.UserInput]
    blocks = list(loop.context_blocks)
    waiting: list[ReferenceCall] = []
    history = loop.messages
    if inputs and deps.context is not None:
        # A new user input starts a loop: assemble what the tape does not hold.
        rec = step.record
        previous = rec.previous_run_id if loop.loops_started == 0 else ""
        for part in await deps.context.assemble(ContextRequest(
                rec.identity, rec.session_id, rec.run_id, inputs[-1].text, previous,
                rec.agent_id, run_postures(step))):
            batch.add(pb.ContextStage(
                stage=part.stage, content=part.content, tokens=part.tokens,
                tokenizer=part.tokenizer, reason=part.reason, item_ids=list(part.item_ids),
                scores_bps=list(part.scores_bps), turn=turn))
            waiting += part.awaiting_approval
            if part.content:
                blocks.append(part.content)
    if waiting:
        # References whose tool needs an approval: the run parks on them first, and
        # the model is called (with their results) once they are all answered.
        await propose_references(step, batch, waiting, loop.turn_count)
        return
    new = [ChatMessage(role="user", content=m.text, images=images_of(m)) for m in inputs]
    if inputs:
        # Compaction is planned only when an input starts a loop (never inside one).
        history = await maybe_compact(step, batch, blocks, new, turn)
    system = [ChatMessage(role="system", content=b) for b in blocks]
    messages, dropped, saved = prune([*system, *history, *new],
                                     deps.config.context_budget_tokens,
                                     _sizes(loop, system, history, new))
    if dropped:
        batch.add(pb.ContextStage(
            stage="prune", tokens=saved, tokenizer=ESTIMATE, turn=turn,
            reason=f"left out the {dropped} oldest messages (~{saved} tokens) to fit the "
                   f"budget of {deps.config.context_budget_tokens} tokens"))
    batch.add(pb.AgentLoop(phase=_PHASE.TURN_STARTED, turn=turn))
    # Uncommitted members ride along with a cancel/fail commit if the call dies.
    step.carry(batch)
    step.phase = "model"
    tokens = TokenBuffer(deps.config.token_words_per_event, deps.config.token_chars_per_event)
    warnings = check_budgets(step)
    request = ModelRequest(messages=messages, tools=deps.tools.catalog())
    routed: Routed | None = None
    flushed_at = -math.inf  # the first token group is committed at once
    streamed = False  # a token group of this turn is already in a batch
    try:
        with step.active(), step.deadline.within(step.remaining_wall_s()):
            call = call_model(step, request)
            chunks = call.chunks
            try:  # contextlib.aclosing's work, without its three calls a turn
                async for chunk in chunks:
                    if not isinstance(chunk, TextDelta):
                        routed = call.routed(chunk)
                        continue
                    groups = tokens.push(chunk.text)
                    batch.add(*[pb.ModelToken(token=g, is_final=False, turn=turn)
                                for g in groups])
                    streamed = streamed or bool(groups)
                    if groups and time.monotonic() - flushed_at >= deps.config.token_flush_s:
                        await batch.commit()
                        flushed_at = time.monotonic()
                        batch = step.writer.batch()
                        step.carry(batch)
            finally:
                await chunks.aclose()
    except TimeoutError:
        # The limit may have struck while a token commit was landing: that
        # batch is durable, so the loop ends in a fresh one.
        await terminate(step, "wall_clock_limit", None if batch.committed else batch)
        return
    if routed is None:
        raise PalyraInternalError("provider stream ended without a Completed chunk")
    rest = tokens.rest()
    response = routed.answer.response
    text = clip_reply(response.text, deps.config.max_reply_chars)
    if rest and (streamed or response.tool_calls or rest != text):
        # A final answer that is one unstreamed group is not taped a third time: its
        # provider_turn_output and message_replied, in this same append, carry that text
        # (spec: tape.proto ModelToken; docs/journal/format.md, "Run tape events").
        batch.add(pb.ModelToken(token=rest, is_final=True, turn=turn))
    tally = usage_of(step, routed.answer)
    batch.add(turn_output(routed.answer, turn, text, tally, warnings))
    if routed.cache_write is not None:
        batch.write(routed.cache_write)
    rec = step.record
    batch.write(deps.usage.record(UsageRow(
        day=day_of(deps.now_ms()), principal=rec.identity.principal, agent_id=rec.agent_id,
        session_id=rec.session_id, run_id=rec.run_id, provider=routed.answer.target.provider,
        model=response.model or routed.answer.target.model, tally=tally)))
    batch.set(usage=rec.usage.plus(tally))
    if response.tool_calls:
        await propose(step, batch, response.tool_calls, turn)
    else:
        batch.add(
            pb.MessageReplied(reply_text=text),
            pb.AgentLoop(phase=_PHASE.TURN_COMPLETED, turn=turn),
            pb.AgentLoop(phase=_PHASE.TERMINATED, turn=turn, reason="final_answer"),
        )
        await batch.complete_if_requested().commit()
    step.carry(None)


def _sizes(loop: LoopState, system: list[ChatMessage], history: list[ChatMessage],
           new: list[ChatMessage]) -> list[int] | None:
    """The provider input's token estimates, the history's as the fold made them (None
    when this turn compacted the history: ``prune`` then estimates every message)."""
    known = loop.history_tokens()
    if history is not loop.messages or known is None:
        return None
    return [*map(estimate_tokens, system), *known, *map(estimate_tokens, new)]


def check_budgets(step: Step) -> list[str]:
    """Before a model call: the spent ``suggest`` budgets, to warn of on the tape.

    Raises:
        PalyraError: ``BUDGET_EXHAUSTED`` when an ``enforced`` budget of the run's
            principal or agent is spent (the run then fails with that reason).
    """
    rec, deps = step.record, step.deps
    if rec.token_budget and rec.usage.tokens >= rec.token_budget:
        raise PalyraError(
            f"budget exhausted: the run's own budget ({rec.usage.tokens}/{rec.token_budget} "
            "tokens, a delegation's slice) is spent", code=ErrorCode.BUDGET_EXHAUSTED,
            details={"scope": "run", "subject": rec.run_id})
    spent = [s for s in deps.usage.budgets(rec.identity.principal, rec.agent_id,
                                           day_of(deps.now_ms())) if s.exhausted]
    for state in spent:
        if state.budget.mode == "enforced":
            raise budget_exhausted(state)
    return [s.describe() for s in spent]


def usage_of(step: Step, answer: Answered) -> Tally:
    """What one model call used and cost (a response-cache hit uses nothing)."""
    if answer.cached:
        return Tally(cache_hits=1)
    usage, response = answer.response.usage, answer.response
    cost = cost_micros(step.deps.usage.config.prices, answer.target.provider,
                       response.model or answer.target.model,
                       input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                       cached_input_tokens=usage.cached_input_tokens)
    return Tally(calls=1, input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                 cached_input_tokens=usage.cached_input_tokens, cost_micros=cost)


def turn_output(answer: Answered, turn: int, text: str, tally: Tally,
                warnings: list[str]) -> pb.ProviderTurnOutput:
    """The tape's record of a model call: what it said, who said it, what it cost."""
    response = answer.response
    return pb.ProviderTurnOutput(
        turn=turn, text=text, finish_reason=response.finish_reason,
        tool_call_count=len(response.tool_calls), input_tokens=tally.input_tokens,
        output_tokens=tally.output_tokens, provider=answer.target.provider,
        model=response.model or answer.target.model, cached=answer.cached,
        failovers=[pb.ProviderFailover(provider=f.target.provider, model=f.target.model,
                                       code=pb.ErrorCode[f.code.value], message=f.message)
                   for f in answer.failovers],
        cached_input_tokens=tally.cached_input_tokens, cost_micros=tally.cost_micros,
        budget_warnings=warnings)
