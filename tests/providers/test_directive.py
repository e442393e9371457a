"""The scripted model's ``/call TOOL {json}`` directive."""

from __future__ import annotations

import pytest

from palyra.providers import ChatMessage, ModelRequest, ToolCall, scripted_reply
from palyra.providers._directive import BadDirective, Directive, is_directive, parse_directive


@pytest.mark.parametrize(("text", "expected"), [
    ("/call echo", Directive("echo", {})),
    ('/call echo {"text": "hi"}', Directive("echo", {"text": "hi"})),
    ('  /call mcp.files.read   {"path": "a.txt"}  ', Directive("mcp.files.read", {"path": "a.txt"})),
    ('/call add\n{"a": 1, "b": 2}', Directive("add", {"a": 1, "b": 2})),
])
def test_parses(text: str, expected: Directive) -> None:
    assert is_directive(text)
    assert parse_directive(text) == expected


@pytest.mark.parametrize(("text", "problem"), [
    ("/call", "tool name is missing"),
    ("/call {}", "tool name is missing"),
    ("/call echo {text}", "not JSON"),
    ("/call echo [1, 2]", "must be a JSON object"),
    ('/call echo{"text": 1}', "is not a tool name"),
])
def test_refuses(text: str, problem: str) -> None:
    parsed = parse_directive(text)
    assert isinstance(parsed, BadDirective) and problem in parsed.problem


@pytest.mark.parametrize("text", ["/callecho", "please /call echo", "/cancel", "hello"])
def test_other_text_is_not_a_directive(text: str) -> None:
    assert not is_directive(text)


def test_reply_asks_for_the_call_then_returns_its_result() -> None:
    messages = [ChatMessage("user", '/call echo {"text": "add 1 to it 3 times"}')]
    first = scripted_reply(ModelRequest(messages))
    assert first.finish_reason == "tool_calls" and first.text == ""
    assert first.tool_calls == [ToolCall("call_0", "echo", {"text": "add 1 to it 3 times"})]
    messages += [ChatMessage("assistant", "", first.tool_calls),
                 ChatMessage("tool", '{"text":"add 1 to it 3 times"}', tool_call_id="call_0")]
    second = scripted_reply(ModelRequest(messages))
    assert second.finish_reason == "stop" and not second.tool_calls
    assert second.text == '{"text":"add 1 to it 3 times"}'


def test_a_bad_directive_is_answered_not_called() -> None:
    reply = scripted_reply(ModelRequest([ChatMessage("user", "/call echo nope")]))
    assert not reply.tool_calls and reply.text.startswith("/call: the arguments are not JSON")
