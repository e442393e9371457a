"""The scripted provider implements the tool-loop rule exactly, and echoes."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from palyra.providers import (
    ChatMessage,
    Completed,
    ModelRequest,
    ProviderConfig,
    ScriptedProvider,
    TextDelta,
    ToolCall,
    build_provider,
    parse_tool_value,
    scripted_reply,
)

PROMPT = (
    "Start from 0 and add 1 to the running total {k} times, one `add` tool call per step, "
    "then reply with the final result."
)


def _add_output(a: int, b: int) -> str:
    # Exactly what the add tool returns.
    return msgspec.json.encode({"result": a + b}).decode()


async def _drive(provider: ScriptedProvider, k: int, tool: str = "add") -> tuple[str, int]:
    """Run the workload loop against the provider; return (final text, steps)."""
    messages = [ChatMessage("system", "be terse"), ChatMessage("user", PROMPT.format(k=k))]
    steps = 0
    while True:
        response = await provider.complete(ModelRequest(messages))
        if response.finish_reason != "tool_calls":
            return response.text, steps
        assert response.text == ""
        [call] = response.tool_calls
        assert call.id == f"call_{steps}"
        assert call.name == tool
        if tool == "add":
            output = _add_output(call.arguments["a"], call.arguments["b"])
        else:
            output = msgspec.json.encode({"text": call.arguments["text"]}).decode()
        messages += [
            ChatMessage("assistant", "", [call]),
            ChatMessage("tool", output, tool_call_id=call.id),
        ]
        steps += 1


@pytest.mark.parametrize("k", [0, 1, 10, 20])
async def test_tool_loop_add(k: int) -> None:
    text, steps = await _drive(ScriptedProvider(), k)
    assert (text, steps) == (f"result={k}", k)


@pytest.mark.parametrize("k", [1, 10])
async def test_tool_loop_echo_variant(k: int) -> None:
    provider = build_provider(ProviderConfig(scripted_tool="echo"))
    assert isinstance(provider, ScriptedProvider)
    text, steps = await _drive(provider, k, tool="echo")
    assert (text, steps) == (f"result={k}", k)


def test_first_step_is_add_zero_plus_one() -> None:
    response = scripted_reply(ModelRequest([ChatMessage("user", PROMPT.format(k=3))]))
    assert response.tool_calls == [ToolCall("call_0", "add", {"a": 0, "b": 1})]
    assert response.finish_reason == "tool_calls"


def test_only_messages_after_last_user_count() -> None:
    # A previous turn's tool results must not leak into the next turn.
    old = [
        ChatMessage("user", PROMPT.format(k=1)),
        ChatMessage("assistant", "", [ToolCall("call_0", "add", {"a": 0, "b": 1})]),
        ChatMessage("tool", _add_output(0, 1), tool_call_id="call_0"),
        ChatMessage("assistant", "result=1"),
        ChatMessage("user", PROMPT.format(k=2)),
    ]
    response = scripted_reply(ModelRequest(old))
    assert response.tool_calls == [ToolCall("call_0", "add", {"a": 0, "b": 1})]


@given(st.integers(min_value=-(2**53), max_value=2**53))
def test_add_output_round_trips(value: int) -> None:
    assert parse_tool_value(msgspec.json.encode({"result": value}).decode()) == value
    assert parse_tool_value(str(value)) == value
    assert parse_tool_value(msgspec.json.encode({"text": str(value)}).decode()) == value


def test_unparseable_tool_value_reads_as_zero() -> None:
    assert parse_tool_value("nope") == 0
    assert parse_tool_value("true") == 0
    assert parse_tool_value("[1]") == 0


async def test_echo_mode_streams_words() -> None:
    provider = ScriptedProvider()
    request = ModelRequest([ChatMessage("user", "hello  there, world")])
    chunks = [c async for c in provider.stream(request)]
    deltas = [c.text for c in chunks if isinstance(c, TextDelta)]
    assert deltas == ["hello  ", "there, ", "world"]
    final = chunks[-1]
    assert isinstance(final, Completed)
    assert final.response.text == "".join(deltas) == "hello  there, world"
    assert final.response.finish_reason == "stop"
    assert final.response.usage.output_tokens == 3


async def test_cancel_mid_call_propagates() -> None:
    provider = ScriptedProvider(delay_s=3600)
    request = ModelRequest([ChatMessage("user", "hi")])
    task = asyncio.create_task(provider.complete(request))
    await asyncio.sleep(0)  # let it reach the delay
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_denied_step_keeps_the_running_total() -> None:
    """Step 1 approved (total 1), step 2 denied: the total stays 1, it is not reset to 0."""
    call0 = ToolCall("call_0", "add", {"a": 0, "b": 1})
    call1 = ToolCall("call_1", "add", {"a": 1, "b": 1})
    denied = msgspec.json.encode({"error": "denied: approval denied"}).decode()
    messages = [ChatMessage("user", PROMPT.format(k=3)),
                ChatMessage("assistant", "", [call0]),
                ChatMessage("tool", _add_output(0, 1), tool_call_id="call_0"),
                ChatMessage("assistant", "", [call1]),
                ChatMessage("tool", denied, tool_call_id="call_1")]
    response = scripted_reply(ModelRequest(messages))
    assert response.tool_calls == [ToolCall("call_2", "add", {"a": 1, "b": 1})]
    final = scripted_reply(ModelRequest(messages[:-2] + messages[-2:] + [
        ChatMessage("assistant", "", [response.tool_calls[0]]),
        ChatMessage("tool", denied, tool_call_id="call_2")]))
    assert final.text == "result=1"
