"""Pruning the provider input to the budget: system blocks and the current turn always stay,
no tool result loses its call, the oldest history goes first, and the result fits when it can."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

from engine_harness import USER, Harness
from hypothesis import given
from hypothesis import strategies as st
from palyra_gen.palyra import v1 as pb
from planned_provider import PlannedProvider, reply

from palyra.engine import EngineConfig
from palyra.engine.model.prune import estimate_tokens, prune
from palyra.providers import ChatMessage, ToolCall


@st.composite
def _conversation(draw: st.DrawFn) -> list[ChatMessage]:
    out = [ChatMessage(role="system", content=draw(st.text(max_size=40)))]
    for turn in range(draw(st.integers(0, 6))):
        out.append(ChatMessage(role="user", content=draw(st.text(max_size=60))))
        for call in range(draw(st.integers(0, 2))):
            cid = f"c{turn}-{call}"
            out.append(ChatMessage(role="assistant", content="",
                                   tool_calls=[ToolCall(id=cid, name="add", arguments={"a": 1})]))
            out.append(ChatMessage(role="tool", content=draw(st.text(max_size=60)),
                                   tool_call_id=cid))
        out.append(ChatMessage(role="assistant", content=draw(st.text(max_size=60))))
    out.append(ChatMessage(role="user", content=draw(st.text(max_size=60))))
    return out


@given(messages=_conversation(), budget=st.integers(0, 400))
def test_prune_keeps_what_must_stay(messages: list[ChatMessage], budget: int) -> None:
    kept, dropped, saved = prune(messages, budget)
    assert len(kept) + dropped == len(messages)
    assert [m for m in messages if m.role == "system"] == [m for m in kept if m.role == "system"]
    assert kept[-1] == messages[-1]  # the current turn
    calls = {c.id for m in kept for c in m.tool_calls}
    assert all(m.tool_call_id in calls for m in kept if m.role == "tool")
    assert saved == sum(estimate_tokens(m) for m in messages) - sum(
        estimate_tokens(m) for m in kept)
    history = [m for m in messages[:-1] if m.role != "system"]
    kept_history = [m for m in kept[:-1] if m.role != "system"]
    assert kept_history == history[len(history) - len(kept_history):]  # oldest go first
    must = sum(estimate_tokens(m) for m in messages if m.role == "system") + estimate_tokens(
        messages[-1])
    if budget and must <= budget:
        assert sum(estimate_tokens(m) for m in kept) <= budget or not kept_history
    if not budget:
        assert dropped == 0


@given(messages=_conversation(), budget=st.integers(0, 400))
def test_prune_with_the_sizes_it_is_given_prunes_as_it_would_alone(
        messages: list[ChatMessage], budget: int) -> None:
    sizes = [estimate_tokens(m) for m in messages]
    assert prune(messages, budget, sizes) == prune(messages, budget)
    # The sizes given are what it counts (the loop's, made once per message).
    given_sizes = [s + 7 for s in sizes]
    kept, dropped, saved = prune(messages, budget, given_sizes)
    left = iter(kept)
    at = next(left, None)
    gone = []
    for message, size in zip(messages, given_sizes, strict=True):
        if message is at:
            at = next(left, None)
        else:
            gone.append(size)
    assert len(gone) == dropped and sum(gone) == saved


async def test_a_long_session_is_pruned_and_the_tape_says_so(tmp_path: Path) -> None:
    provider = PlannedProvider(lambda request: reply("x" * 300))
    harness = Harness(tmp_path / "data", config=EngineConfig(context_budget_tokens=200))
    harness.provider_factory = lambda: provider
    app = await harness.start()
    try:
        stream = app.run_stream(USER, _inputs(["first question " * 10, "second", "third"]))
        events = [r.event async for r in stream if r.event]
        prunes = [e.context_stage for e in events if e.context_stage and
                  e.context_stage.stage == "prune"]
        assert prunes and prunes[-1].tokens > 0 and "estimate" in prunes[-1].tokenizer
        last = provider.requests[-1].messages
        assert last[-1].content == "third"
        assert sum(estimate_tokens(m) for m in last) <= 200
        assert "first question" not in " ".join(m.content for m in last)
    finally:
        await harness.stop()


async def _inputs(texts: list[str]) -> AsyncIterator[pb.RunStreamRequest]:
    for text in texts:
        yield pb.RunStreamRequest(v=1, input=pb.MessageInput(text=text))
