"""Compaction's pinning property over random tapes (pure: the real fold, no journal).

Whatever the tape, a compaction keeps the most recent user messages, every
approval request and decision and every policy decision verbatim, condenses
exactly the other older messages of its range, and keeps the rest in order.
"""

from __future__ import annotations

from typing import Any

import betterproto2
import msgspec
from hypothesis import event, given, settings
from hypothesis import strategies as st
from palyra_gen.palyra import v1 as pb

from palyra.engine.model import compaction
from palyra.engine.model.compaction import CompactionSettings, Plan
from palyra.engine.model.fold import LoopState
from palyra.engine.model.prune import estimate_tokens
from palyra.engine.model.tape import payload_of
from palyra.providers import ChatMessage

_PHASE = pb.AgentLoopPhase
_OUT = pb.ToolDecisionOutcome
_words = st.one_of(st.text(alphabet="abcdefgh ijklmnop", max_size=40),
                   st.integers(0, 900).map(lambda n: ("lorem ipsum dolor " * 50)[:n]))


@st.composite
def _loop(draw: st.DrawFn, n: int) -> list[betterproto2.Message]:
    """One agent loop: an input, tool calls (allowed, approved, refused, denied), a reply."""
    out: list[betterproto2.Message] = [
        pb.UserInput(text=draw(_words), input_id=f"in{n}"),
        pb.AgentLoop(phase=_PHASE.STARTED), pb.AgentLoop(phase=_PHASE.TURN_STARTED)]
    for c in range(draw(st.integers(0, 3))):
        pid = f"p{n}-{c}"
        out.append(pb.ModelToken(token=draw(_words)))
        out.append(pb.ProviderTurnOutput(text=draw(_words), tool_call_count=1))
        outcome = draw(st.sampled_from([_OUT.ALLOW, _OUT.NEEDS_APPROVAL, _OUT.DENY]))
        decision = pb.ToolDecision(proposal_id=pid, outcome=outcome, policy_hash=f"h{n}",
                                   reason=draw(_words))
        if draw(st.booleans()):
            out.append(pb.ToolProposal(proposal_id=pid, tool_name="add",
                                       input_json='{"a":1,"b":2}', decision=decision))
        else:  # an older tape: the decision is its own event
            out += [pb.ToolProposal(proposal_id=pid, tool_name="add", input_json='{"a":1}'),
                    decision]
        if outcome == _OUT.NEEDS_APPROVAL:
            approved = draw(st.booleans())
            out += [pb.ToolApprovalRequest(approval_id=f"a{n}-{c}", proposal_id=pid,
                                           tool_name="add", args_digest="d"),
                    pb.ToolApprovalResponse(approval_id=f"a{n}-{c}", proposal_id=pid,
                                            approved=approved, decided_by="admin:ops")]
        out.append(pb.ToolResult(proposal_id=pid, tool_name="add", success=True,
                                 output_json=draw(_words)))
        out.append(pb.AgentLoop(phase=_PHASE.TURN_COMPLETED))
    out += [pb.ProviderTurnOutput(text=draw(_words)), pb.MessageReplied(reply_text="r"),
            pb.AgentLoop(phase=_PHASE.TERMINATED)]
    return out


@st.composite
def _tape(draw: st.DrawFn) -> list[list[betterproto2.Message]]:
    return [draw(_loop(n)) for n in range(draw(st.integers(1, 9)))]


_settings = st.builds(CompactionSettings, trigger_tokens=st.just(0),
                      min_saved_tokens=st.integers(0, 30), cooldown_ms=st.just(0),
                      keep_user_messages=st.integers(0, 8), max_per_run=st.just(9),
                      keep_recent=st.integers(1, 8), min_condensed=st.integers(1, 5))


def _fold(loop: LoopState, members: list[betterproto2.Message],
          seen: dict[int, tuple[str, betterproto2.Message]]) -> None:
    for m in members:
        seen[loop.tape_len] = ("tape." + type(m).__name__, m)
        loop.apply(m)


def _json(value: Any) -> str:
    return msgspec.json.encode(value, order="sorted").decode()


def _compact(loop: LoopState, cfg: CompactionSettings) -> Plan | str:
    history = loop.history()
    plan = compaction.plan(history, cfg, input_tokens=10_000, attempts=0,
                           last_compaction_ms=None, now_ms=0)
    if isinstance(plan, str):
        return plan
    event = pb.SessionCompaction(strategy=compaction.STRATEGY, first_seq=plan.first_seq,
                                 last_seq=plan.last_seq, pinned_seqs=list(plan.pinned_seqs),
                                 summary="- a summary line", digest_sha256="0" * 64)
    loop.apply(event)
    return plan


@settings(max_examples=300, deadline=None)
@given(tape=_tape(), cfg=_settings, rounds=st.integers(1, 3))
def test_pinned_events_survive_compaction_verbatim(
        tape: list[list[betterproto2.Message]], cfg: CompactionSettings, rounds: int) -> None:
    loop = LoopState()
    seen: dict[int, tuple[str, betterproto2.Message]] = {}
    per_round = max(1, len(tape) // rounds)
    chunks = [tape[i:i + per_round] for i in range(0, len(tape), per_round)]
    for chunk in chunks:
        for members in chunk:
            _fold(loop, members, seen)
        before = list(zip(loop.message_seqs, loop.messages, strict=True))
        users = [s for s, m in before if m.role == "user"]
        records = list(loop.pin_records)
        # The estimates the fold keeps are those of the messages, folded or compacted.
        assert loop.history_tokens() == [estimate_tokens(m) for m in loop.messages]
        plan = _compact(loop, cfg)
        assert loop.history_tokens() == [estimate_tokens(m) for m in loop.messages]
        after = list(zip(loop.message_seqs, loop.messages, strict=True))
        event("compacted" if not isinstance(plan, str) else "not compacted")
        if isinstance(plan, str):
            assert after == before
            continue
        first, last = plan.first_seq, plan.last_seq
        pinned = set(plan.pinned_seqs)
        in_range = [(s, m) for s, m in before if first <= s <= last]
        # The most recent user messages are pinned and stay as they were, in their place.
        recent = set(users[-cfg.keep_user_messages:]) if cfg.keep_user_messages else set()
        for s, m in in_range:
            if s in recent:
                assert s in pinned and (s, m) in after
        # Condensed: exactly the other messages of the range (earlier summaries stay).
        condensed = [(s, m) for s, m in in_range if s not in pinned]
        assert list(plan.condensed) == condensed
        assert all(m.role != "system" for _, m in condensed)
        assert not any(pair in after for pair in condensed)
        assert len(condensed) >= cfg.min_condensed
        # Every approval request/response and policy decision of the range is pinned and
        # rendered verbatim (as journaled: its canonical JSON) in the summary's block.
        summary = [m.content for s, m in after if s not in {x for x, _ in before}]
        assert len(summary) == 1 and "- a summary line" in summary[0]
        shown = {r["seq"]: r for ln in summary[0].splitlines() if ln.startswith("{")
                 for r in [msgspec.json.decode(ln)]}
        for r in records:
            _, member = seen[r.seq]
            original = member.decision if isinstance(member, pb.ToolProposal) else member
            assert r.member is original
            if first <= r.seq <= last:
                assert r.seq in pinned and _json(payload_of(original)) in summary[0]
                assert shown.pop(r.seq)["event"] == payload_of(original)
            else:
                assert r in loop.pin_records
        assert not shown  # nothing but the range's records is shown
        assert {s for s in pinned if seen[s][0] != "tape.SessionCompaction"} <= (
            {r.seq for r in records} | {s for s, _ in in_range})
        # Nothing outside the range changes, and the order is kept.
        outside = [(s, m) for s, m in before if not first <= s <= last]
        assert [p for p in after if p in outside] == outside
        kept = [(s, m) for s, m in before if s in pinned or not first <= s <= last]
        assert [p for p in after if p in before] == kept
        # No tool result is left without the call it answers.
        calls = {c.id for _, m in after for c in m.tool_calls}
        assert all(m.tool_call_id in calls for _, m in after if m.role == "tool")
        # The summary stands where the first condensed message stood.
        at = before.index(condensed[0])
        assert after[at][1].role == "system"
        assert after[:at] == before[:at]
        seen[loop.tape_len - 1] = ("tape.SessionCompaction", pb.SessionCompaction())


def test_tool_results_never_lose_their_call() -> None:
    """The kept window never starts with a tool result: its call is kept with it."""
    loop = LoopState()
    loop.apply(pb.UserInput(text="go " * 40))
    for i in range(8):
        loop.apply(pb.ProviderTurnOutput(text="", tool_call_count=1))
        loop.apply(pb.ToolProposal(proposal_id=f"p{i}", tool_name="add", input_json="{}",
                                   decision=pb.ToolDecision(proposal_id=f"p{i}",
                                                            outcome=_OUT.ALLOW)))
        loop.apply(pb.ToolResult(proposal_id=f"p{i}", tool_name="add", success=True,
                                 output_json='{"result": "%s"}' % ("x" * 600)))
    cfg = CompactionSettings(trigger_tokens=0, min_saved_tokens=0, keep_recent=5,
                             keep_user_messages=0)
    plan = _compact(loop, cfg)
    assert not isinstance(plan, str)
    messages = [m for m in loop.messages if m.role != "system"]
    assert messages[0].role == "assistant" and len(messages) == 6
    calls = {c.id for m in messages for c in m.tool_calls}
    assert all(m.tool_call_id in calls for m in messages if m.role == "tool")


def test_thresholds_and_bounds() -> None:
    loop = LoopState()
    for i in range(8):
        loop.apply(pb.UserInput(text=f"question {i} " * 20))
        loop.apply(pb.ProviderTurnOutput(text=f"answer {i} " * 20))
    history = loop.history()
    cfg = CompactionSettings()
    ok = compaction.plan(history, cfg, input_tokens=480, attempts=0, last_compaction_ms=None,
                         now_ms=0)
    assert isinstance(ok, Plan) and ok.first_seq == 0 and ok.last_seq == 9
    assert ok.pinned_seqs == (4, 6, 8)  # of the 6 newest user messages
    assert [s for s, _ in ok.condensed] == [0, 1, 2, 3, 5, 7, 9]
    assert compaction.plan(history, cfg, input_tokens=479, attempts=0, last_compaction_ms=None,
                           now_ms=0) == "input ~479 tokens < 480"
    assert "attempts" in str(compaction.plan(history, cfg, input_tokens=10**6, attempts=3,
                                             last_compaction_ms=None, now_ms=0))
    assert compaction.plan(history, cfg, input_tokens=10**6, attempts=1,
                           last_compaction_ms=1000, now_ms=1000 + 299_999) == "cooling down"
    assert isinstance(compaction.plan(history, cfg, input_tokens=10**6, attempts=1,
                                      last_compaction_ms=1000, now_ms=1000 + 300_000), Plan)
    few = CompactionSettings(min_condensed=8)
    assert "condensable" in str(compaction.plan(history, few, input_tokens=10**6, attempts=0,
                                                last_compaction_ms=None, now_ms=0))


def test_summary_is_clipped_to_eight_lines() -> None:
    text = "\n".join(f"line {i} " + "x" * 400 for i in range(20)) + "\n\n"
    cleaned = compaction.clean_summary(text, CompactionSettings())
    lines = cleaned.splitlines()
    assert len(lines) == 8 and all(len(ln) <= 300 for ln in lines)


def test_markers_agree() -> None:
    from palyra.providers._scripted import SUMMARY_MARKER
    assert compaction.SUMMARY_MARKER == SUMMARY_MARKER
    prompt = [ChatMessage(role="system", content="a"), ChatMessage(role="user", content="b")]
    assert compaction.prompt_sha256(prompt) != compaction.prompt_sha256(list(reversed(prompt)))
