"""Server-sent events for server-streaming RPCs, as a raw ASGI response.

Owning the ASGI exchange (rather than Litestar's generic streaming response)
lets one task group hold everything the stream needs: the producer reading
the application iterator, the disconnect watcher, and keep-alive frames. It
also lets an error raised *promptly* (unknown run, forbidden, bad cursor)
become a proper HTTP status, while a later one becomes an ``event: error``
frame once the 200 headers are out.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import betterproto2
import msgspec
from litestar.types import Receive, Scope, Send
from palyra_gen.palyra import v1

from palyra.transport.errors import WireError, to_wire

_json = msgspec.json.Encoder()
_END = object()


def sse_frame(message: betterproto2.Message) -> bytes:
    """One SSE frame. Tape events carry ``id: <tape_seq>`` and their kind as ``event:``."""
    event = getattr(message, "event", None)
    lines = []
    if isinstance(event, v1.TapeEvent):
        kind, _ = betterproto2.which_one_of(event, "event")
        lines.append(f"id: {event.tape_seq}")
        lines.append(f"event: {kind or 'tape'}")
    elif isinstance(getattr(message, "chunk_seq", None), int):
        lines.append(f"id: {message.chunk_seq}")  # type: ignore[attr-defined]
        lines.append("event: chunk")
    else:
        lines.append("event: message")
    data = _json.encode(message.to_dict()).decode()
    lines.append(f"data: {data}")
    return ("\n".join(lines) + "\n\n").encode()


def error_frame(wire: WireError) -> bytes:
    """The terminal ``event: error`` frame (same body as an HTTP error)."""
    return b"event: error\ndata: " + _json.encode(wire.http_body()) + b"\n\n"


def json_error_response(wire: WireError) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """Status, headers and body of an HTTP error answer."""
    body = _json.encode(wire.http_body())
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    return wire.http_status, headers, body


class SseResponse:
    """ASGI app streaming ``source`` as SSE."""

    def __init__(
        self,
        source: AsyncIterator[betterproto2.Message],
        *,
        error_grace_s: float,
        keepalive_s: float,
        request_id: str,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self._source = source
        self._grace = error_grace_s
        self._keepalive = keepalive_s
        self._request_id = request_id
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=64)
        try:
            async with asyncio.TaskGroup() as tg:
                producer = tg.create_task(self._produce(queue))
                gone = tg.create_task(_wait_disconnect(receive))
                try:
                    await self._deliver(tg, queue, gone, send)
                finally:
                    producer.cancel()
                    gone.cancel()
        finally:
            with contextlib.suppress(Exception):
                await _aclose(self._source)
            if self._on_close is not None:
                self._on_close()

    async def _produce(self, queue: asyncio.Queue[Any]) -> None:
        try:
            async for item in self._source:
                await queue.put(item)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await queue.put(to_wire(exc, request_id=self._request_id))
            return
        await queue.put(_END)

    async def _deliver(
        self, tg: asyncio.TaskGroup, queue: asyncio.Queue[Any], gone: asyncio.Task[None], send: Send
    ) -> None:
        getter: asyncio.Task[Any] | None = None
        started = False
        try:
            while True:
                if getter is None:
                    getter = tg.create_task(queue.get())
                timeout = self._keepalive if started else self._grace
                done, _ = await asyncio.wait({getter, gone}, timeout=timeout,
                                             return_when=asyncio.FIRST_COMPLETED)
                if gone in done:
                    return
                if getter not in done:
                    if not started:
                        await _start(send)
                        started = True
                    else:
                        await _body(send, b": keepalive\n\n")
                    continue
                item, getter = getter.result(), None
                if isinstance(item, WireError) and not started:
                    status, headers, body = json_error_response(item)
                    await send({"type": "http.response.start", "status": status, "headers": headers})
                    await send({"type": "http.response.body", "body": body, "more_body": False})
                    return
                if not started:
                    await _start(send)
                    started = True
                if item is _END:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    return
                if isinstance(item, WireError):
                    await _body(send, error_frame(item))
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    return
                await _body(send, sse_frame(item))
        finally:
            if getter is not None:
                getter.cancel()


async def _start(send: Send) -> None:
    await send({
        "type": "http.response.start",
        "status": 200,
        "headers": [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ],
    })


async def _body(send: Send, chunk: bytes) -> None:
    await send({"type": "http.response.body", "body": chunk, "more_body": True})


async def _wait_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _aclose(source: AsyncIterator[Any]) -> None:
    aclose = getattr(source, "aclose", None)
    if aclose is not None:
        await aclose()
