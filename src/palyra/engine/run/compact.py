"""A compaction attempt, when a new input starts a loop (the I/O around ``model.compaction``).

The pure module decides and builds; this one asks the run's model route for
the summary, reads the covered events back from the journal for their digest
(the journal stores payloads redacted, and the digest is over what it stores,
so the verifier can recompute it), and puts the ``session_compaction`` event in
the step's batch, ahead of the model call it shrinks. It is one append with the
turn: a crash before it commits leaves no trace, and the restarted run simply
plans again. An attempt that does not help (the summariser failed or saved too
little) writes a ``context_stage`` ``compaction`` event saying why; it counts
against ``compaction_max_per_run`` like a compaction does. A loop start that the
plan refuses (``input ~N tokens < 480``, ``saves < 120``, cooling down, ...)
writes a ``compaction_skipped`` stage with the reason, once per loop.
"""

from __future__ import annotations

from collections.abc import Sequence

from palyra_gen.palyra import v1 as pb

from palyra.core.errors import PalyraError, PalyraInternalError
from palyra.core.tape_digest import TapeDigest
from palyra.engine.model import compaction
from palyra.engine.model.compaction import CompactionSettings, Plan
from palyra.engine.model.config import EngineConfig
from palyra.engine.model.fold import COMPACTION_FAILED_STAGE, COMPACTION_SKIPPED_STAGE
from palyra.engine.model.prune import ESTIMATE, estimate_tokens
from palyra.engine.run.step import Step
from palyra.engine.run.writer import Batch
from palyra.journal import JournalStore
from palyra.providers import Answered, ChatMessage, ModelRequest, complete_routed

_PAGE = 1000


def settings_of(config: EngineConfig) -> CompactionSettings:
    """The ``session_window_v1`` settings of an engine config."""
    return CompactionSettings(
        enabled=config.compaction_enabled,
        trigger_tokens=config.compaction_trigger_tokens,
        min_saved_tokens=config.compaction_min_saved_tokens,
        cooldown_ms=int(config.compaction_cooldown_s * 1000),
        keep_user_messages=config.compaction_keep_user_messages,
        max_per_run=config.compaction_max_per_run,
    )


def covered_digest(store: JournalStore, run_id: str, first: int, last: int) -> str:
    """The digest of tape seqs ``first..last`` of ``run_id`` as stored."""
    digest = TapeDigest()
    after = first - 1
    while after < last:
        page = store.read_tape(run_id, after, min(_PAGE, last - after))
        for event in page.events:
            if event.tape_seq > last:
                break
            if event.tape_seq != after + 1:
                raise PalyraInternalError(f"tape of run {run_id} has a gap at {after + 1}")
            digest.add(event.tape_seq, event.kind, event.payload)
            after = event.tape_seq
        if page.next_after_seq is None:
            break
    if after != last:
        raise PalyraInternalError(f"tape of run {run_id} ends before seq {last}")
    return digest.hexdigest()


def _tokens(messages: Sequence[ChatMessage]) -> int:
    return sum(estimate_tokens(m) for m in messages)


async def maybe_compact(step: Step, batch: Batch, blocks: Sequence[str],
                        inputs: Sequence[ChatMessage], turn: int) -> list[ChatMessage]:
    """The run's conversation for this turn's provider input, compacted if it is due.

    ``blocks`` are the loop's system blocks and ``inputs`` the new user
    messages (both part of the input estimate, neither ever compacted).
    """
    deps, loop = step.deps, step.writer.loop
    settings = settings_of(deps.config)
    if (not settings.enabled or len(loop.messages) <= settings.keep_recent
            or loop.compaction_attempts >= settings.max_per_run):
        return loop.messages  # the cheap refusals first: no estimate of the history
    system = [ChatMessage(role="system", content=b) for b in blocks]
    fixed = _tokens(system) + _tokens(inputs)
    known = loop.history_tokens()
    before = fixed + (sum(known) if known is not None else _tokens(loop.messages))
    history = loop.history()
    plan = compaction.plan(history, settings, input_tokens=before,
                           attempts=loop.compaction_attempts,
                           last_compaction_ms=loop.last_compaction_ms, now_ms=deps.now_ms())
    if isinstance(plan, str):
        # Planned only when an input starts a loop, so at most one such note a loop;
        # the cheap refusals above (a short conversation) write none.
        batch.add(pb.ContextStage(stage=COMPACTION_SKIPPED_STAGE, tokenizer=ESTIMATE,
                                  reason=f"not compacted: {plan}", turn=turn))
        return loop.messages
    if step.remaining_wall_s() <= 0:
        return loop.messages
    attempt = loop.compaction_attempts + 1
    prompt = compaction.summary_prompt(plan, settings)
    try:
        with step.active(), step.deadline.within(step.remaining_wall_s()):
            # The run's own route (its agent's provider and model, with
            # failover), not the daemon's default provider.
            answer = await complete_routed(deps.models.resolve(step.record.model_route),
                                           ModelRequest(messages=prompt))
    except (PalyraError, TimeoutError) as exc:
        code = exc.code.name if isinstance(exc, PalyraError) else "DEADLINE_EXCEEDED"
        _failed(batch, turn, f"attempt {attempt}: the summariser failed ({code}); "
                             "nothing was compacted")
        return loop.messages
    summary = compaction.clean_summary(answer.response.text, settings)
    event = _event(step, plan, summary, prompt, answer, before, attempt)
    seq = loop.tape_len + len(batch.members)
    messages, _, _ = compaction.apply(history, event, seq)
    after = fixed + _tokens(messages)
    if not summary or before - after < settings.min_saved_tokens:
        _failed(batch, turn, f"attempt {attempt}: the summary saved ~{before - after} tokens "
                             f"(< {settings.min_saved_tokens}); nothing was compacted")
        return loop.messages
    event.tokens_after = after
    event.digest_sha256 = covered_digest(step.deps.store, step.run_id, plan.first_seq,
                                         plan.last_seq)
    batch.add(event)
    return messages


def _event(step: Step, plan: Plan, summary: str, prompt: Sequence[ChatMessage],
           answer: Answered, before: int, attempt: int) -> pb.SessionCompaction:
    deps, target = step.deps, answer.target
    return pb.SessionCompaction(
        strategy=compaction.STRATEGY, first_seq=plan.first_seq, last_seq=plan.last_seq,
        summariser_provider=target.provider,
        summariser_model=answer.response.model or target.model or target.provider,
        prompt_sha256=compaction.prompt_sha256(prompt), pinned_seqs=list(plan.pinned_seqs),
        summary=summary, tokens_before=before, attempt=attempt,
        created_unix_ms=deps.now_ms(), covered_events=plan.last_seq - plan.first_seq + 1)


def _failed(batch: Batch, turn: int, reason: str) -> None:
    batch.add(pb.ContextStage(stage=COMPACTION_FAILED_STAGE, tokenizer=ESTIMATE, reason=reason,
                              turn=turn))
