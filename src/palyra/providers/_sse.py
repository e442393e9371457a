"""A minimal Server-Sent Events decoder over an async iterator of lines.

Both vendors stream SSE; only ``event:`` and ``data:`` fields matter here.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator

import msgspec


class SseEvent(msgspec.Struct, frozen=True):
    """One dispatched event: its type (``message`` if unnamed) and data."""

    event: str
    data: str


async def iter_sse(lines: AsyncIterable[str]) -> AsyncIterator[SseEvent]:
    """Decode SSE events from text lines (without their line terminators).

    Multiple ``data:`` lines of one event are joined with newlines, per the
    SSE spec. Comments (``:``) and unknown fields are ignored.
    """
    event = ""
    data: list[str] = []
    async for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield SseEvent(event or "message", "\n".join(data))
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
    if data:  # stream ended without the final blank line
        yield SseEvent(event or "message", "\n".join(data))
