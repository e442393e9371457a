"""Anthropic Messages API provider (``/v1/messages``, streaming, tool use)."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from palyra.core.errors import ErrorCode
from palyra.providers._http import (
    HttpProvider,
    decode_event,
    parse_arguments,
    stream_ended_early,
)
from palyra.providers._sse import SseEvent
from palyra.providers._types import (
    ChatMessage,
    Completed,
    FinishReason,
    ModelRequest,
    ModelResponse,
    ProviderChunk,
    TextDelta,
    ToolCall,
    Usage,
)
from palyra.providers.resilience import ProviderFailure

_STOP: dict[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
}


def messages_to_anthropic(
    messages: list[ChatMessage],
) -> tuple[str, list[dict[str, Any]]]:
    """Split out the system prompt and map the rest to Anthropic messages.

    Tool results become ``tool_result`` blocks of a ``user`` message, and
    consecutive messages of the same role are merged, because the Messages API
    requires user/assistant alternation.

    Returns:
        ``(system_text, messages)``.
    """
    system = "\n\n".join(m.content for m in messages if m.role == "system")
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        blocks: list[dict[str, Any]]
        if message.role == "tool":
            role = "user"
            # A tool's images go inside its tool_result, after its text.
            content: str | list[dict[str, Any]] = message.content
            if message.images:
                content = [{"type": "text", "text": message.content}, *_images(message)]
            blocks = [
                {
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id,
                    "content": content,
                }
            ]
        else:
            role = message.role
            blocks = [{"type": "text", "text": message.content}] if message.content else []
            blocks += _images(message)
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                for c in message.tool_calls
            ]
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return system, out


def _images(message: ChatMessage) -> list[dict[str, Any]]:
    return [{"type": "image", "source": {"type": "base64", "media_type": i.mime_type,
                                         "data": base64.b64encode(i.data).decode()}}
            for i in message.images]


@dataclasses.dataclass
class _Block:
    kind: str
    id: str = ""
    name: str = ""
    parts: list[str] = dataclasses.field(default_factory=list)


class AnthropicProvider(HttpProvider):
    """Streams ``POST {base_url}/v1/messages`` with ``stream: true``.

    Handles ``message_start``, ``content_block_start/delta/stop`` (``text_delta``
    and ``input_json_delta``), ``message_delta`` (stop reason, output usage),
    ``message_stop``, ``ping`` and ``error`` events.
    """

    default_base_url = "https://api.anthropic.com"

    @property
    def name(self) -> str:
        """Always ``anthropic``."""
        return "anthropic"

    def _path(self) -> str:
        return "/v1/messages"

    def _headers(self) -> dict[str, str]:
        headers = {"anthropic-version": self._config.anthropic_version}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        system, messages = messages_to_anthropic(request.messages)
        body: dict[str, Any] = {
            "model": request.model or self._config.model,
            "max_tokens": request.max_tokens or self._config.max_tokens,
            "messages": messages,
            "stream": True,
        }
        if system:
            body["system"] = system
        if request.tools:
            body["tools"] = [
                {
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.parameters_json_schema,
                }
                for t in request.tools
            ]
        if request.temperature is not None:
            body["temperature"] = request.temperature
        return body

    async def _decode(self, events: AsyncIterator[SseEvent]) -> AsyncGenerator[ProviderChunk, None]:
        blocks: dict[int, _Block] = {}
        stop_reason = ""
        input_tokens = output_tokens = cached_tokens = 0
        model = ""
        async for event in events:
            obj = decode_event(event)
            kind = obj.get("type", event.event)
            if kind == "message_start":
                message = obj.get("message") or {}
                model = message.get("model", "")
                usage = message.get("usage") or {}
                # Anthropic counts cache reads and writes apart from input_tokens;
                # palyra's input_tokens is every input token.
                cached_tokens = int(usage.get("cache_read_input_tokens") or 0)
                input_tokens = (int(usage.get("input_tokens", 0)) + cached_tokens
                                + int(usage.get("cache_creation_input_tokens") or 0))
                output_tokens = int(usage.get("output_tokens", 0))
            elif kind == "content_block_start":
                block = obj.get("content_block") or {}
                blocks[int(obj.get("index", 0))] = _Block(
                    kind=block.get("type", ""), id=block.get("id", ""), name=block.get("name", "")
                )
            elif kind == "content_block_delta":
                delta = obj.get("delta") or {}
                target = blocks.setdefault(int(obj.get("index", 0)), _Block(kind="text"))
                if delta.get("type") == "text_delta" and (text := delta.get("text")):
                    target.parts.append(text)
                    yield TextDelta(text)
                elif delta.get("type") == "input_json_delta":
                    target.parts.append(delta.get("partial_json", ""))
            elif kind == "message_delta":
                stop_reason = (obj.get("delta") or {}).get("stop_reason") or stop_reason
                output_tokens = int((obj.get("usage") or {}).get("output_tokens", output_tokens))
            elif kind == "message_stop":
                break
            elif kind == "error":
                error = obj.get("error") or {}
                raise ProviderFailure(
                    f"stream error: {error.get('type', '')}: {error.get('message', '')}"[:300],
                    code=ErrorCode.PROVIDER_UNAVAILABLE,
                    transient=True,
                )
            # ping and content_block_stop carry nothing we need.
        else:
            raise stream_ended_early()
        ordered = [blocks[i] for i in sorted(blocks)]
        tool_calls = [
            ToolCall(id=b.id, name=b.name, arguments=parse_arguments("".join(b.parts)))
            for b in ordered
            if b.kind == "tool_use"
        ]
        text = "".join("".join(b.parts) for b in ordered if b.kind == "text")
        reason: FinishReason = "tool_calls" if tool_calls else _STOP.get(stop_reason, "stop")
        if reason == "tool_calls" and not tool_calls:
            reason = "stop"
        yield Completed(
            ModelResponse(
                text=text,
                tool_calls=tool_calls,
                finish_reason=reason,
                usage=Usage(input_tokens, output_tokens, cached_tokens),
                model=model,
            )
        )
