"""Streamed replies of any length, limits mid-stream, oversized tool arguments (issue 12).

- A wall-clock limit that strikes while a token commit is landing ends the loop
  cleanly (``wall_clock_limit``), never "a run batch was committed twice".
- A 2 MB reply finishes: its tokens hold every character, the summary events a
  clipped prefix with a note, and token commits are coalesced.
- Tool arguments over the limit are taped as a placeholder and denied; the run
  goes on and its user input stays on its tape.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

from engine_harness import Harness, fast_config, run_to_end
from palyra_gen.palyra import v1 as pb
from planned_provider import PlannedProvider, ask, reply, tool_results_since_user

from palyra.engine import member_from
from palyra.providers import Completed, ModelRequest, ModelResponse, ProviderChunk, TextDelta, Usage


class Streaming:
    """A provider that streams ``text`` in ``piece``-sized deltas (forever when ``endless``)."""

    def __init__(self, text: str, piece: int, *, endless: bool = False) -> None:
        self.text, self.piece, self.endless = text, piece, endless

    @property
    def name(self) -> str:
        return "streaming"

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ProviderChunk, None]:
        while True:
            for i in range(0, len(self.text), self.piece):
                yield TextDelta(self.text[i:i + self.piece])
                await asyncio.sleep(0)
            if not self.endless:
                break
        yield Completed(ModelResponse(text=self.text, tool_calls=[], finish_reason="stop",
                                      usage=Usage(1, 1)))

    async def complete(self, request: ModelRequest) -> ModelResponse:
        raise NotImplementedError

    async def aclose(self) -> None:
        return None


async def test_wall_clock_limit_mid_stream_ends_cleanly(harness: Harness) -> None:
    # Every group commits at once, so the limit very likely lands inside a commit.
    harness.config = fast_config(max_wall_s=0.15, token_flush_s=0.0, token_words_per_event=1)
    harness.provider_factory = lambda: Streaming("word " * 50, 5, endless=True)
    app = await harness.start()
    for _ in range(6):
        run = await run_to_end(app, "talk forever")
        assert run.state == pb.RunState.DONE, (run.end_reason, run.last_error)
        assert run.end_reason == "wall_clock_limit"
        assert run.final_text == "stopped: wall-clock limit (0.15 s) reached"
        harness.check_tape(run.run_id)


async def test_a_two_megabyte_reply_finishes_with_every_character(harness: Harness) -> None:
    text = "".join(f"w{i} " if i % 7 else "x" * 300 for i in range(42_000))
    assert len(text) > 2_000_000
    harness.provider_factory = lambda: Streaming(text, 64)
    app = await harness.start()
    assert harness.store is not None
    before = harness.store.stats().commits
    run = await run_to_end(app, "say a lot")
    commits = harness.store.stats().commits - before
    assert run.state == pb.RunState.DONE and run.end_reason == "completed"
    members = _whole_tape(harness, run.run_id)
    tokens = [m for m in members if isinstance(m, pb.ModelToken)]
    assert "".join(t.token for t in tokens) == text
    assert tokens[-1].is_final and not any(t.is_final for t in tokens[:-1])
    assert max(len(t.token) for t in tokens) <= 4096
    replied = next(m for m in members if isinstance(m, pb.MessageReplied))
    assert len(replied.reply_text) <= 64 * 1024 and "model_token events" in replied.reply_text
    assert run.final_text == replied.reply_text
    # Token groups are coalesced into commits, not one durable commit per group.
    assert commits < len(tokens) / 4, (commits, len(tokens))


def _whole_tape(harness: Harness, run_id: str) -> list[Any]:
    assert harness.store is not None
    out, after = [], -1
    while True:
        page = harness.store.read_tape(run_id, after, 1000)
        out += [member_from(e.kind, e.payload) for e in page.events]
        if page.next_after_seq is None:
            return out
        after = page.next_after_seq


async def test_oversized_tool_arguments_are_denied_not_fatal(harness: Harness) -> None:
    huge = {"text": "y" * (200 * 1024)}

    def plan(request: ModelRequest) -> ModelResponse:
        return reply("gave up on the big call") if tool_results_since_user(request) \
            else ask(("echo", huge))

    harness.provider_factory = lambda: PlannedProvider(plan)
    app = await harness.start()
    run = await run_to_end(app, "please echo this big thing")
    assert run.state == pb.RunState.DONE and run.final_text == "gave up on the big call"
    members = harness.members(run.run_id)
    inputs = [m for m in members if isinstance(m, pb.UserInput)]
    assert [i.text for i in inputs] == ["please echo this big thing"]
    proposal = next(m for m in members if isinstance(m, pb.ToolProposal))
    placeholder: dict[str, Any] = json.loads(proposal.input_json)
    assert placeholder["bytes"] > 200 * 1024 and len(placeholder["sha256"]) == 64
    decision = proposal.decision
    assert decision is not None and decision.outcome == pb.ToolDecisionOutcome.DENY and "limit" in decision.reason
    result = next(m for m in members if isinstance(m, pb.ToolResult))
    assert not result.success and result.error.startswith("denied: tool arguments are")
    harness.check_tape(run.run_id)
