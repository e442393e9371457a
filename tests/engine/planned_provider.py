"""A ``ModelProvider`` for tests whose answers follow a plan, and test tools.

``PlannedProvider`` answers each request with ``plan(request)`` and keeps every
request it was sent, so a test can assert what the model *received* (the
message order after tool calls), not only what the tape says.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

import msgspec

from palyra.providers import (
    Completed,
    ModelRequest,
    ModelResponse,
    ProviderChunk,
    TextDelta,
    ToolCall,
    Usage,
)
from palyra.tools import Capability, ToolContext, ToolOutput, ToolSpec

Plan = Callable[[ModelRequest], ModelResponse]


class PlannedProvider:
    """Implements ``palyra.providers.ModelProvider`` over a plan function."""

    def __init__(self, plan: Plan, *, delay_s: float = 0.0) -> None:
        self.plan = plan
        self.delay_s = delay_s
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return "planned"

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ProviderChunk, None]:
        self.requests.append(request)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        response = self.plan(request)
        if response.text:
            yield TextDelta(response.text)
        yield Completed(response)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        response: ModelResponse | None = None
        async for chunk in self.stream(request):
            if isinstance(chunk, Completed):
                response = chunk.response
        assert response is not None
        return response

    async def aclose(self) -> None:
        return None


def reply(text: str) -> ModelResponse:
    """A final answer."""
    return ModelResponse(text=text, tool_calls=[], finish_reason="stop", usage=Usage(1, 1))


def ask(*calls: tuple[str, dict[str, Any]]) -> ModelResponse:
    """One turn asking for ``calls`` (name, arguments), in that order."""
    return ModelResponse(
        text="", finish_reason="tool_calls", usage=Usage(1, 1),
        tool_calls=[ToolCall(id=f"call_{i}", name=n, arguments=a)
                    for i, (n, a) in enumerate(calls)])


def tool_results_since_user(request: ModelRequest) -> int:
    """How many tool messages follow the last user message."""
    last_user = max(i for i, m in enumerate(request.messages) if m.role == "user")
    return sum(1 for m in request.messages[last_user + 1:] if m.role == "tool")


def calls_then(calls: Sequence[tuple[str, dict[str, Any]]], final: str) -> Plan:
    """Ask for ``calls`` in one turn, then answer ``final`` once results are in."""
    def plan(request: ModelRequest) -> ModelResponse:
        return reply(final) if tool_results_since_user(request) else ask(*calls)
    return plan


class TextArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    text: str


def recording_tool(name: str, seen: list[tuple[str, str]], *, delay_s: float = 0.0,
                   capabilities: Sequence[str] = (Capability.READ_ONLY,)) -> ToolSpec[Any]:
    """A tool that sleeps ``delay_s``, appends ``(name, text)`` to ``seen`` and echoes."""

    async def handler(args: TextArgs, ctx: ToolContext) -> ToolOutput:
        await asyncio.sleep(delay_s)
        seen.append((name, args.text))
        return ToolOutput({"tool": name, "text": args.text})

    return ToolSpec(name, f"Test tool {name}.", TextArgs,
                    frozenset(Capability(c) for c in capabilities), handler, timeout_s=30.0)
