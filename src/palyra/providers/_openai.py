"""OpenAI-compatible ``/v1/chat/completions`` provider (streaming, tools)."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import msgspec

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

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "stop",
}


def messages_to_openai(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """The conversation in OpenAI's shape.

    A ``tool`` message carries text only there, so the images tools returned
    follow the turn's tool messages as one ``user`` message of image parts
    (between two tool messages it would break the turn's pairing).
    """
    out: list[dict[str, Any]] = []
    held: list[ChatMessage] = []
    for message in messages:
        if held and message.role != "tool":
            out.append(_tool_images(held))
            held = []
        out.append(message_to_openai(message))
        if message.role == "tool" and message.images:
            held.append(message)
    if held:
        out.append(_tool_images(held))
    return out


def _tool_images(messages: list[ChatMessage]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    for message in messages:
        parts.append({"type": "text", "text": f"images returned by tool call "
                                              f"{message.tool_call_id}:"})
        parts += _image_parts(message)
    return {"role": "user", "content": parts}


def _image_parts(message: ChatMessage) -> list[dict[str, Any]]:
    return [{"type": "image_url", "image_url": {
        "url": f"data:{i.mime_type};base64,{base64.b64encode(i.data).decode()}"}}
        for i in message.images]


def message_to_openai(message: ChatMessage) -> dict[str, Any]:
    """Map one ``ChatMessage`` to the OpenAI chat message shape."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            # OpenAI wants null, not "", next to tool calls.
            "content": message.content or None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": msgspec.json.encode(call.arguments).decode(),
                    },
                }
                for call in message.tool_calls
            ],
        }
    if message.images:
        parts: list[dict[str, Any]] = [{"type": "text", "text": message.content}] \
            if message.content else []
        parts += _image_parts(message)
        return {"role": message.role, "content": parts}
    return {"role": message.role, "content": message.content}


@dataclasses.dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = dataclasses.field(default_factory=list)


class OpenAIProvider(HttpProvider):
    """Streams ``POST {base_url}/v1/chat/completions`` with ``stream: true``.

    Tool calls are accumulated from ``delta.tool_calls`` fragments by their
    ``index``; usage comes from the final chunk (``stream_options.include_usage``).
    """

    default_base_url = "https://api.openai.com"

    @property
    def name(self) -> str:
        """Always ``openai``."""
        return "openai"

    def _path(self) -> str:
        return "/v1/chat/completions"

    def _headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model or self._config.model,
            "messages": messages_to_openai(request.messages),
            "max_tokens": request.max_tokens or self._config.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters_json_schema,
                    },
                }
                for t in request.tools
            ]
        if request.temperature is not None:
            body["temperature"] = request.temperature
        return body

    async def _decode(self, events: AsyncIterator[SseEvent]) -> AsyncGenerator[ProviderChunk, None]:
        text: list[str] = []
        calls: dict[int, _PartialCall] = {}
        finish: str | None = None
        usage = Usage()
        model = ""
        async for event in events:
            if event.data.strip() == "[DONE]":
                break
            obj = decode_event(event)
            if "error" in obj:
                raise ProviderFailure(
                    f"stream error: {str(obj['error'])[:300]}",
                    code=ErrorCode.PROVIDER_UNAVAILABLE,
                    transient=True,
                )
            model = obj.get("model") or model
            if u := obj.get("usage"):
                details = u.get("prompt_tokens_details") or {}
                usage = Usage(int(u.get("prompt_tokens", 0)), int(u.get("completion_tokens", 0)),
                              int(details.get("cached_tokens") or 0))
            for choice in obj.get("choices") or ():
                delta = choice.get("delta") or {}
                if content := delta.get("content"):
                    text.append(content)
                    yield TextDelta(content)
                for fragment in delta.get("tool_calls") or ():
                    partial = calls.setdefault(int(fragment.get("index", 0)), _PartialCall())
                    partial.id = partial.id or fragment.get("id") or ""
                    function = fragment.get("function") or {}
                    partial.name = partial.name or function.get("name") or ""
                    if args := function.get("arguments"):
                        partial.arguments.append(args)
                if choice_finish := choice.get("finish_reason"):
                    finish = choice_finish
        if finish is None:
            raise stream_ended_early()
        tool_calls = [
            ToolCall(
                id=p.id or f"call_{i}", name=p.name, arguments=parse_arguments("".join(p.arguments))
            )
            for i, p in sorted(calls.items())
        ]
        reason: FinishReason = "tool_calls" if tool_calls else _FINISH.get(finish, "stop")
        if reason == "tool_calls" and not tool_calls:
            reason = "stop"
        yield Completed(
            ModelResponse(
                text="".join(text),
                tool_calls=tool_calls,
                finish_reason=reason,
                usage=usage,
                model=model,
            )
        )
