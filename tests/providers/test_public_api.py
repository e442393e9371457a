"""Snapshot of the public surface, plus small pure helpers."""

from __future__ import annotations

import pytest

import palyra.providers as providers
from palyra.core.errors import ErrorCode, PalyraError
from palyra.providers import ChatMessage, ModelProvider, ProviderConfig, ToolCall, build_provider
from palyra.providers._anthropic import messages_to_anthropic
from palyra.providers._http import parse_arguments
from palyra.providers._sse import SseEvent, iter_sse


def test_exports_snapshot() -> None:
    # The literal list is the snapshot: adding or removing an export shows up here.
    assert providers.__all__ == [
        "CACHE_KEY_PREFIX",
        "Answered",
        "AnthropicProvider",
        "BreakerState",
        "CachedAnswer",
        "ChatMessage",
        "CircuitBreaker",
        "Completed",
        "Failover",
        "FinishReason",
        "ImagePart",
        "ModelProvider",
        "ModelRequest",
        "ModelResponse",
        "OpenAIProvider",
        "ProviderChunk",
        "ProviderConfig",
        "ProviderKind",
        "ProviderRegistry",
        "RetryPolicy",
        "Role",
        "ScriptedProvider",
        "ScriptedTool",
        "Target",
        "TextDelta",
        "ToolCall",
        "ToolSpecForModel",
        "Usage",
        "build_provider",
        "cacheable",
        "collect_response",
        "complete_routed",
        "decode_entry",
        "encode_entry",
        "parse_target",
        "parse_tool_value",
        "request_digest",
        "scripted_reply",
        "stream_routed",
    ]
    assert all(hasattr(providers, name) for name in providers.__all__)


def test_scripted_is_a_model_provider() -> None:
    assert isinstance(build_provider(ProviderConfig()), ModelProvider)


def test_unknown_kind_is_config_invalid() -> None:
    with pytest.raises(PalyraError) as failed:
        build_provider(ProviderConfig(kind="gemini"))  # type: ignore[arg-type]
    assert failed.value.code is ErrorCode.CONFIG_INVALID


async def _lines(*lines: str):  # type: ignore[no-untyped-def]
    for line in lines:
        yield line


async def test_sse_decoder() -> None:
    events = [
        e
        async for e in iter_sse(
            _lines(": keepalive", "event: a", "data: 1", "data: 2", "", "data: x", "", "data: tail")
        )
    ]
    assert events == [SseEvent("a", "1\n2"), SseEvent("message", "x"), SseEvent("message", "tail")]


def test_parse_arguments() -> None:
    assert parse_arguments("") == {}
    assert parse_arguments('{"a": 1}') == {"a": 1}
    assert parse_arguments("[1]") == {"_raw_arguments": "[1]"}
    assert parse_arguments("{oops") == {"_raw_arguments": "{oops"}


def test_anthropic_mapping_merges_tool_results() -> None:
    calls = [ToolCall("t1", "add", {"a": 1}), ToolCall("t2", "echo", {"text": "x"})]
    system, messages = messages_to_anthropic(
        [
            ChatMessage("system", "s1"),
            ChatMessage("user", "go"),
            ChatMessage("assistant", "ok", calls),
            ChatMessage("tool", "1", tool_call_id="t1"),
            ChatMessage("tool", "2", tool_call_id="t2"),
        ]
    )
    assert system == "s1"
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert [b["type"] for b in messages[1]["content"]] == ["text", "tool_use", "tool_use"]
    assert [b["tool_use_id"] for b in messages[2]["content"]] == ["t1", "t2"]
