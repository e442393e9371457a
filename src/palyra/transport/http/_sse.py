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
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

import betterproto2
import msgspec
from litestar.types import Receive, Scope, Send
from palyra_gen.palyra import v1

from palyra.app import TapeResponse
from palyra.core.protojson import encode_message
from palyra.transport.errors import WireError, to_wire
from palyra.transport.http._json import camel, proto_meta
from palyra.transport.streams import OpenStreams

_json = msgspec.json.Encoder()
_END = object()


def sse_frame(message: betterproto2.Message) -> bytes:
    """SSE frames for one streamed message. Tape events carry ``id: <tape_seq>`` and their
    kind as ``event:``.

    A batched message (``events``, see ``WatchRunRequest.batch``) becomes one frame per
    event, each exactly the frame its unbatched message would give, so a client cannot
    tell the two apart except that a batch arrives in one write.
    """
    if type(message) is TapeResponse:
        # RunStream's tape: its batch's events, each framed as its own unbatched message,
        # encoded straight from the stored batch (no TapeEvent objects).
        head = b'{"v":%d,"event":' % message.v if message.v else b'{"event":'
        return b"".join(b"id: %d\nevent: %s\ndata: %s%s}\n\n" % (
            seq, kind.encode(), head, _json.encode(body))
            for seq, kind, body in message.tape.json_events())
    events = getattr(message, "events", None)
    if events and all(isinstance(e, v1.TapeEvent) for e in events):
        # The message's other fields once, without its events: each event is
        # encoded once, into its own frame (not also into a copy thrown away).
        rest = encode_message(dataclasses.replace(message, events=[]))  # type: ignore[type-var]
        rest.pop("events", None)
        return b"".join(_tape_frame(e, {**rest, "event": encode_message(e)}) for e in events)
    event = getattr(message, "event", None)
    if isinstance(event, v1.TapeEvent):
        return _tape_frame(event, encode_message(message))
    lines = []
    if isinstance(getattr(message, "chunk_seq", None), int):
        lines.append(f"id: {message.chunk_seq}")  # type: ignore[attr-defined]
        lines.append("event: chunk")
    else:
        lines.append("event: message")
    data = _json.encode(encode_message(message)).decode()
    lines.append(f"data: {data}")
    return ("\n".join(lines) + "\n\n").encode()


# A tape event's kind (its ``event`` oneof member) by the member's JSON key: read off
# the event's encoded dict, a handful of keys, where ``betterproto2.which_one_of``
# reads every member of the oneof (~40) on the message for each frame.
_KIND_OF_KEY = {camel(f.name): f.name
                for f in proto_meta(v1.TapeEvent).oneof_field_by_group["event"]}


def _tape_frame(event: v1.TapeEvent, body: dict[str, Any]) -> bytes:
    kind = next((_KIND_OF_KEY[k] for k in body["event"] if k in _KIND_OF_KEY), "tape")
    head = f"id: {event.tape_seq}\nevent: {kind}\ndata: ".encode()
    return head + _json.encode(body) + b"\n\n"


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
    """ASGI app streaming ``source`` as SSE.

    One task pulls the source and writes frames (no per-event tasks: this is
    the hot path of every watched run); a sibling watches for the client's
    disconnect and cancels it; another sends keep-alive comments when idle.
    """

    def __init__(
        self,
        source: AsyncIterator[betterproto2.Message],
        *,
        error_grace_s: float,
        keepalive_s: float,
        request_id: str,
        streams: OpenStreams | None = None,
    ) -> None:
        self._streams = streams
        self._source = source
        self._grace = error_grace_s
        self._keepalive = keepalive_s
        self._request_id = request_id
        self._lock = asyncio.Lock()
        self._last_send = 0.0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._streams is not None:
            self._streams.counts["sse"] += 1
        try:
            async with asyncio.TaskGroup() as tg:
                first = tg.create_task(_first(self._source, self._request_id))
                streaming = tg.create_task(self._stream(first, tg, send))
                watcher = tg.create_task(_cancel_on_disconnect(receive, streaming))
                try:
                    await asyncio.wait({streaming})
                finally:
                    # A client gone before the first event leaves `first` waiting.
                    first.cancel()
                    watcher.cancel()
        finally:
            if self._streams is not None:
                self._streams.counts["sse"] -= 1
            with contextlib.suppress(Exception):
                await _aclose(self._source)

    async def _stream(self, first: asyncio.Task[Any], tg: asyncio.TaskGroup, send: Send) -> None:
        # Errors raised within the grace window become a plain HTTP error.
        done, _ = await asyncio.wait({first}, timeout=self._grace)
        if done and isinstance(first.result(), WireError):
            status, headers, body = json_error_response(first.result())
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        await _start(send)
        self._last_send = time.monotonic()
        pinger = tg.create_task(self._ping(send))
        try:
            item = await first
            while item is not _END:
                if isinstance(item, WireError):
                    await self._send(send, error_frame(item))
                    break
                await self._send(send, sse_frame(item))
                try:
                    item = await anext(self._source)
                except StopAsyncIteration:
                    item = _END
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    item = to_wire(exc, request_id=self._request_id)
            async with self._lock:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            pinger.cancel()

    async def _send(self, send: Send, chunk: bytes) -> None:
        async with self._lock:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            self._last_send = time.monotonic()

    async def _ping(self, send: Send) -> None:
        while True:
            idle = time.monotonic() - self._last_send
            if idle >= self._keepalive:
                await self._send(send, b": keepalive\n\n")
                idle = 0.0
            await asyncio.sleep(self._keepalive - idle)


async def _first(source: AsyncIterator[Any], request_id: str) -> Any:
    """The first item, ``_END``, or the error as a :class:`WireError` (never raises)."""
    try:
        return await anext(source)
    except StopAsyncIteration:
        return _END
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return to_wire(exc, request_id=request_id)


async def _cancel_on_disconnect(receive: Receive, task: asyncio.Task[None]) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            task.cancel()
            return


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


async def _aclose(source: AsyncIterator[Any]) -> None:
    aclose = getattr(source, "aclose", None)
    if aclose is not None:
        await aclose()
