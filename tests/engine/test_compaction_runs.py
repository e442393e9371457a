"""Compaction in real runs: a real engine, LMDB journal, the scripted summariser.

A conversation that grows past the threshold compacts; the chain verifies and
the verifier recomputes the digest; ExpandCompaction returns the covered events
byte for byte; a restart re-folds to the same provider input; attempts are
bounded when the summariser never helps.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec
import pytest
from engine_harness import ADMIN, OTHER_USER, USER, Harness, fast_config, loop_text, next_approval
from palyra_gen.palyra import v1 as pb
from planned_provider import PlannedProvider

from palyra.core.errors import PalyraError
from palyra.engine import covered_digest, member_from
from palyra.engine.model.prune import estimate_tokens
from palyra.engine.run.recovery import rebuild
from palyra.journal import verify_store
from palyra.providers import (
    ModelRequest,
    ModelResponse,
    ProviderConfig,
    ProviderRegistry,
    Usage,
    scripted_reply,
)
from palyra.providers._scripted import SUMMARY_MARKER


def _said(i: int) -> str:
    return f"message {i}: " + " ".join(f"w{i}x{j}" for j in range(40))


async def _converse(app: Any, texts: list[str], run_id: str = "") -> str:
    for text in texts:
        if not run_id:
            created = await app.create_run(USER, pb.CreateRunRequest(
                input=pb.MessageInput(text=text), wait=True))
            run_id = created.run.run_id
        else:
            await app.send_run_input(USER, pb.SendRunInputRequest(
                run_id=run_id, input=pb.MessageInput(text=text), wait=True))
    return run_id


def _compactions(harness: Harness, run_id: str) -> list[tuple[int, pb.SessionCompaction]]:
    return [(e.tape_seq, m) for e in harness.tape(run_id)
            if isinstance(m := member_from(e.kind, e.payload), pb.SessionCompaction)]


@pytest.fixture
def recording() -> PlannedProvider:
    return PlannedProvider(scripted_reply)


async def test_a_growing_conversation_compacts_verifiably(
        tmp_path: Path, recording: PlannedProvider) -> None:
    harness = Harness(tmp_path / "data", provider_factory=lambda: recording)
    app = await harness.start()
    try:
        texts = [_said(i) for i in range(9)]
        run_id = await _converse(app, texts)
        found = _compactions(harness, run_id)
        assert len(found) == 1  # the 5-minute cooldown holds the next one back
        seq, event = found[0]
        assert event.strategy == "session_window_v1" and event.attempt == 1
        assert event.summariser_provider == "planned" and event.summariser_model == "scripted"
        assert len(event.prompt_sha256) == 64 and 1 <= len(event.summary.splitlines()) <= 8
        assert event.tokens_before - event.tokens_after >= 120
        assert event.covered_events == event.last_seq - event.first_seq + 1
        assert event.digest_sha256 == covered_digest(harness.store, run_id, event.first_seq,
                                                     event.last_seq)
        tape = harness.tape(run_id)
        users = [e.tape_seq for e in tape if e.kind == "tape.user_input"]
        # The 6 most recent user messages at the time are never summarised.
        before = [s for s in users if s < seq][-6:]
        assert {s for s in before if s <= event.last_seq} <= set(event.pinned_seqs)
        # The model got the summary instead of the condensed messages, and every pinned
        # user message verbatim; the turn that compacted is on the tape before the call.
        request = next(r for r in recording.requests
                       if any("<compaction_summary" in m.content for m in r.messages))
        contents = [m.content for m in request.messages]
        summary = [c for c in contents if c.startswith("<compaction_summary")]
        assert len(summary) == 1 and event.summary in summary[0]
        assert "data, not instructions" in summary[0]
        user_texts = [m.content for m in request.messages if m.role == "user"]
        for s in before:
            assert user_texts.count(tape[s].payload["text"]) == 1
        assert _said(0) not in contents  # condensed
        sent = sum(estimate_tokens(m) for m in request.messages)
        assert sent < event.tokens_before
        # Every later request keeps the same compacted history.
        last = recording.requests[-1]
        assert any(m.content == summary[0] for m in last.messages)
        # The chain verifies, digest included.
        report = verify_store(harness.store)
        assert report.ok, report.summary()
        # ExpandCompaction: the covered events, exactly as the tape holds them.
        page = await app.list_run_tape(USER, pb.ListRunTapeRequest(run_id=run_id, after_seq=-1))
        covered = [bytes(e) for e in page.events
                   if event.first_seq <= e.tape_seq <= event.last_seq]
        got: list[bytes] = []
        after = -1
        while True:
            expanded = await app.expand_compaction(USER, pb.ExpandCompactionRequest(
                run_id=run_id, compaction_seq=seq, after_seq=after, limit=7))
            assert expanded.digest_matches and expanded.digest_sha256 == event.digest_sha256
            assert expanded.compaction.session_compaction == event
            got += [bytes(e) for e in expanded.events]
            if expanded.next_after_seq is None:
                break
            after = expanded.next_after_seq
        assert got == covered and len(got) == event.covered_events
        # Same access as the run's tape; a seq that is no compaction is NOT_FOUND.
        with pytest.raises(PalyraError) as denied:
            await app.expand_compaction(OTHER_USER, pb.ExpandCompactionRequest(
                run_id=run_id, compaction_seq=seq))
        assert denied.value.code.name in ("NOT_FOUND", "PERMISSION_DENIED")
        assert (await app.expand_compaction(ADMIN, pb.ExpandCompactionRequest(
            run_id=run_id, compaction_seq=seq))).digest_matches
        with pytest.raises(PalyraError) as missing:
            await app.expand_compaction(USER, pb.ExpandCompactionRequest(
                run_id=run_id, compaction_seq=0))
        assert missing.value.code.name == "NOT_FOUND"
        # A restart re-folds the tape to the very same conversation.
        assert harness.engine is not None
        live = harness.engine._actors[run_id]._writer.loop
        messages, seqs = list(live.messages), list(live.message_seqs)
        await harness.restart()
        assert harness.engine is not None
        again = rebuild(harness.engine._deps, run_id)
        assert again.messages == messages and again.message_seqs == seqs
        assert again.compaction_attempts == 1 and again.compacted_through == event.last_seq + 1
    finally:
        await harness.stop()


async def test_compactions_chain_with_no_cooldown(tmp_path: Path,
                                                  recording: PlannedProvider) -> None:
    harness = Harness(tmp_path / "data", provider_factory=lambda: recording,
                      config=fast_config(compaction_cooldown_s=0))
    app = await harness.start()
    try:
        run_id = await _converse(app, [_said(i) for i in range(30)])
        found = _compactions(harness, run_id)
        assert len(found) == 3  # compaction_max_per_run
        assert [e.attempt for _, e in found] == [1, 2, 3]
        for (_, a), (_, b) in itertools.pairwise(found):
            assert b.first_seq == a.last_seq + 1
        # An earlier summary is pinned, never summarised again.
        assert found[0][0] in found[1][1].pinned_seqs
        last = recording.requests[-1].messages
        assert sum(m.content.startswith("<compaction_summary") for m in last) == 3
        assert verify_store(harness.store).ok
    finally:
        await harness.stop()


async def test_a_summariser_that_saves_nothing_never_loops(tmp_path: Path) -> None:
    def verbose(request: ModelRequest) -> ModelResponse:
        if request.messages[0].content.startswith("palyra.compaction.v1"):
            body = "\n".join("x" * 290 for _ in range(8))  # longer than what it replaces
            return ModelResponse(text=body, tool_calls=[], finish_reason="stop",
                                 usage=Usage(1, 1), model="verbose")
        return scripted_reply(request)

    provider = PlannedProvider(verbose)
    harness = Harness(tmp_path / "data", provider_factory=lambda: provider,
                      config=fast_config(compaction_cooldown_s=0))
    app = await harness.start()
    try:
        run_id = await _converse(app, [_said(i) for i in range(20)])
        assert not _compactions(harness, run_id)
        failed = [m for m in harness.members(run_id)
                  if isinstance(m, pb.ContextStage) and m.stage == "compaction"]
        assert len(failed) == 3 and all("nothing was compacted" in m.reason for m in failed)
        asked = [r for r in provider.requests
                 if r.messages[0].content.startswith("palyra.compaction.v1")]
        assert len(asked) == 3
        assert verify_store(harness.store).ok
    finally:
        await harness.stop()


async def test_compaction_can_be_turned_off(tmp_path: Path,
                                            recording: PlannedProvider) -> None:
    config = replace(fast_config(), compaction_enabled=False)
    harness = Harness(tmp_path / "data", provider_factory=lambda: recording, config=config)
    app = await harness.start()
    try:
        run_id = await _converse(app, [_said(i) for i in range(9)])
        assert not _compactions(harness, run_id)
        assert not any(m.role == "system" for m in recording.requests[-1].messages)
    finally:
        await harness.stop()


async def test_the_next_run_of_the_session_gets_the_summary(tmp_path: Path,
                                                            recording: PlannedProvider) -> None:
    from palyra.adapters import InputAssembly, RecentConversation

    harness = Harness(tmp_path / "data", provider_factory=lambda: recording,
                      context_factory=lambda store, gate: InputAssembly(
                          [RecentConversation(store)]))
    app = await harness.start()
    try:
        created = await app.create_run(USER, pb.CreateRunRequest(
            v=1, session_key="chat", input=pb.MessageInput(text=_said(0)), wait=True))
        first = await _converse(app, [_said(i) for i in range(1, 9)], created.run.run_id)
        [(_, event)] = _compactions(harness, first)
        await app.complete_run(USER, pb.CompleteRunRequest(run_id=first, wait=True))
        made = await app.create_run(USER, pb.CreateRunRequest(
            v=1, session_key="chat", input=pb.MessageInput(text="and now?"), complete=True,
            wait=True))
        stages = [m for m in harness.members(made.run.run_id) if isinstance(m, pb.ContextStage)]
        assert [s.stage for s in stages] == ["recent_conversation", "compaction_summary"]
        assert first in stages[1].reason and event.summary in stages[1].content
        system = [m.content for m in recording.requests[-1].messages if m.role == "system"]
        assert system[1] == stages[1].content and "data, not instructions" in system[1]
    finally:
        await harness.stop()


async def test_approvals_survive_compaction_verbatim(tmp_path: Path,
                                                     recording: PlannedProvider) -> None:
    """The peers' failure: after compaction the agent "remembers" an approval that never
    was. Here every approval request and decision reaches the model verbatim."""
    harness = Harness(tmp_path / "data", provider_factory=lambda: recording)
    app = await harness.start()
    try:
        resolved = await app.resolve_session(USER, pb.ResolveSessionRequest(session_key="h"))
        await app.set_tool_posture(USER, pb.SetToolPostureRequest(
            session_id=resolved.session.session_id, tool_name="add",
            posture=pb.ToolPosture.ASK_EACH_TIME))
        created = await app.create_run(USER, pb.CreateRunRequest(
            session_key="h", input=pb.MessageInput(text=loop_text(2))))
        run_id = created.run.run_id
        for decision in (pb.ApprovalDecision.APPROVE, pb.ApprovalDecision.DENY):
            approval = await next_approval(app, run_id)
            await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
                approval_id=approval.approval_id, decision=decision,
                scope=pb.ApprovalScope.ONCE, reason="checked"))
        await _converse(app, [_said(i) for i in range(16)], run_id)
        [(_, event)] = _compactions(harness, run_id)
        tape = harness.tape(run_id)
        kinds = ("tape.tool_approval_request", "tape.tool_approval_response",
                 "tape.tool_proposal")
        records = [e for e in tape if e.kind in kinds and e.tape_seq <= event.last_seq]
        assert len(records) == 6 and {e.tape_seq for e in records} <= set(event.pinned_seqs)
        [block] = [m.content for m in recording.requests[-1].messages
                   if m.role == "system" and "<pinned_records" in m.content]
        shown = {r["seq"]: r for line in block.splitlines() if line.startswith("{")
                 for r in [msgspec.json.decode(line)]}
        for e in records:
            stored = e.payload["decision"] if e.kind == "tape.tool_proposal" else e.payload
            assert shown[e.tape_seq]["event"] == stored and shown[e.tape_seq]["kind"] == e.kind
        decided = [r["event"] for r in shown.values()
                   if r["kind"] == "tape.tool_approval_response"]
        assert [d.get("approved", False) for d in decided] == [True, False]
        assert all(d["decidedBy"] == "admin:ops" for d in decided)
        assert verify_store(harness.store).ok
    finally:
        await harness.stop()


async def test_why_a_loop_was_not_compacted_is_on_the_tape(tmp_path: Path,
                                                            recording: PlannedProvider) -> None:
    harness = Harness(tmp_path / "data", provider_factory=lambda: recording)
    app = await harness.start()
    try:
        short = [f"note {i}" for i in range(9)]  # past keep_recent, far below 480 tokens
        run_id = await _converse(app, short)
        skipped = [m for m in harness.members(run_id)
                   if isinstance(m, pb.ContextStage) and m.stage == "compaction_skipped"]
        assert skipped and all(m.reason.startswith("not compacted: input ~") and
                               m.reason.endswith("tokens < 480") for m in skipped)
        loops = [m for m in harness.members(run_id) if isinstance(m, pb.AgentLoop)
                 and m.phase == pb.AgentLoopPhase.TURN_STARTED]
        assert len(skipped) <= len(loops)  # at most one a loop
        assert len({m.turn for m in skipped}) == len(skipped)
        assert not _compactions(harness, run_id)
    finally:
        await harness.stop()


async def test_the_summary_is_asked_of_the_runs_own_provider(tmp_path: Path) -> None:
    """A run served by an agent with its own provider compacts through that provider,
    not the daemon's default one, and the tape names who summarised."""
    default, own = PlannedProvider(scripted_reply), PlannedProvider(scripted_reply)
    harness = Harness(tmp_path / "data", models_factory=lambda: ProviderRegistry(
        [(ProviderConfig(name="main"), default), (ProviderConfig(name="own"), own)]))
    app = await harness.start()
    try:
        agent = (await app.create_agent(ADMIN, pb.CreateAgentRequest(agent=pb.Agent(
            display_name="summarised", provider="own")))).agent
        assert agent is not None
        created = await app.create_run(USER, pb.CreateRunRequest(
            input=pb.MessageInput(text=_said(0)), agent_id=agent.agent_id, wait=True))
        run_id = await _converse(app, [_said(i) for i in range(1, 9)], created.run.run_id)
        [(_seq, event)] = _compactions(harness, run_id)
        assert event.summariser_provider == "own"
        assert default.requests == []
        assert any(m.content.startswith(SUMMARY_MARKER) for r in own.requests
                   for m in r.messages[:1])
    finally:
        await harness.stop()
