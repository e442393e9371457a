"""Built-in tools that touch nothing: echo, add, time.now, memory.search."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import msgspec

from palyra.core.capabilities import Capability
from palyra.tools._spec import ToolContext, ToolOutput, ToolSpec

_READ_ONLY = frozenset({Capability.READ_ONLY})


class EchoArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of ``echo``."""

    text: str


class AddArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of ``add``. Integers stay integers."""

    a: int | float
    b: int | float


class NoArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A tool without arguments."""


class MemorySearchArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of ``memory.search``."""

    query: str
    limit: int = 5


async def _echo(args: EchoArgs, ctx: ToolContext) -> ToolOutput:
    return ToolOutput({"text": args.text})


async def _add(args: AddArgs, ctx: ToolContext) -> ToolOutput:
    return ToolOutput({"result": args.a + args.b})


async def _now(args: NoArgs, ctx: ToolContext) -> ToolOutput:
    unix_ms = time.time_ns() // 1_000_000
    iso = datetime.fromtimestamp(unix_ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
    return ToolOutput({"unix_ms": unix_ms, "iso": iso})


async def _memory_search(args: MemorySearchArgs, ctx: ToolContext) -> ToolOutput:
    if ctx.memory_search is None:
        return ToolOutput({"hits": []})
    # Clamp so a model cannot ask the memory store for an unbounded scan.
    hits = await ctx.memory_search(args.query, max(1, min(args.limit, 50)))
    return ToolOutput({"hits": hits})


ECHO: ToolSpec[EchoArgs] = ToolSpec(
    "echo", "Return the given text unchanged.", EchoArgs, _READ_ONLY, _echo, timeout_s=5.0
)
ADD: ToolSpec[AddArgs] = ToolSpec(
    "add", 'Add two numbers; returns {"result": a + b}.', AddArgs, _READ_ONLY, _add, timeout_s=5.0
)
TIME_NOW: ToolSpec[NoArgs] = ToolSpec(
    "time.now", "Current UTC time (unix_ms and ISO 8601).", NoArgs, _READ_ONLY, _now, timeout_s=5.0
)
MEMORY_SEARCH: ToolSpec[MemorySearchArgs] = ToolSpec(
    "memory.search",
    "Search this session's memory; returns up to `limit` hits.",
    MemorySearchArgs,
    _READ_ONLY,
    _memory_search,
    timeout_s=10.0,
)
