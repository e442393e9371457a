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
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import betterproto2
import msgspec
from litestar.types import Receive, Scope, Send
from palyra_gen.palyra import v1

from palyra.app import TapeResponse
from palyra.core.protojson import encode_message
from palyra.transport.errors import WireError, to_wire
from palyra.transport.http._asgi import ON_DISCONNECT
from palyra.transport.http._json import camel, proto_meta
from palyra.transport.streams import OpenStreams

_json = msgspec.json.Encoder()
_END = object()
Watch = Callable[[Callable[[], None]], Callable[[], None]]  # ON_DISCONNECT's value


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
        # A list, not a generator: joining a generator resumes it once per event.
        return b"".join([b"id: %d\nevent: %s\ndata: %s%s}\n\n" % (
            seq, kind.encode(), head, _json.encode(body))
            for seq, kind, body in message.tape.json_events()])
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

    The ASGI server's own task pulls the source and writes frames (no task of
    its own, no per-event tasks: this is the hot path of every watched run, and
    RunStream over HTTP opens one per turn); the client's disconnect cancels it,
    called back by the daemon's protocol (``ON_DISCONNECT``) or, under another
    server, seen by a sibling task blocked in ``receive()``. The error grace window and the keep-alive
    comments are loop timers that make a task only when they fire, so a stream
    that starts within its grace and never idles for ``keepalive_s`` costs one
    task, not four, and nothing stands between the request and its run: each
    task handed on is one more turn of a busy loop before the first event.
    RunStream's batch holding a run's DONE or CANCELLED status ends the response
    in the same write as its frames (as gRPC sends its OK trailers with it); the
    run's clean-up follows when the source is closed.
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
        self._last_send = 0.0
        self._ended = False  # the last body message went: nothing may follow it
        self._ping: asyncio.TimerHandle | None = None
        # The stream's frames and the keep-alives (sent from a task the timer makes) never
        # overlap in ``send``, which can wait (the client reads slowly), and nothing
        # follows the end. A keep-alive is skipped while a frame is being sent (the stream
        # is not idle); a frame waits for a keep-alive in flight. No lock: on a frame's
        # path that was five calls per frame (``async with``, acquire, release) for a
        # keep-alive that almost never runs.
        self._sending = False
        self._keepalive_task: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._streams is not None:
            self._streams.counts["sse"] += 1
        this = asyncio.current_task()
        assert this is not None  # an ASGI app runs in a task
        left: list[bool] = []  # set when the client went away

        def gone() -> None:
            left.append(True)
            this.cancel()

        # The daemon's protocol calls back when the connection goes (ON_DISCONNECT); any
        # other server is watched from a task blocked in ``receive()``.
        fields: Mapping[str, Any] = scope
        watch: Watch | None = (fields.get("extensions") or {}).get(ON_DISCONNECT)
        try:
            async with asyncio.TaskGroup() as tg:
                unwatch = (watch(gone) if watch is not None else
                           tg.create_task(_cancel_on_disconnect(receive, gone)).cancel)
                try:
                    await self._stream(tg, send)
                finally:
                    unwatch()
        except asyncio.CancelledError:
            if not left:
                raise  # not ours: the server is stopping
            this.uncancel()  # the client left: this response is over, quietly
        finally:
            if self._ping is not None:
                self._ping.cancel()
            if self._streams is not None:
                self._streams.counts["sse"] -= 1
            with contextlib.suppress(Exception):
                await _aclose(self._source)

    async def _stream(self, tg: asyncio.TaskGroup, send: Send) -> None:
        # Errors raised within the grace window become a plain HTTP error; past it the
        # 200 head goes out (from a task the timer makes) and errors become frames.
        opening: list[asyncio.Task[None]] = []
        late = asyncio.get_running_loop().call_later(
            self._grace, lambda: opening.append(tg.create_task(self._open(tg, send))))
        try:
            item = await _first(self._source, self._request_id)
        finally:
            late.cancel()
        if opening:
            await opening[0]
        elif isinstance(item, WireError):
            status, headers, body = json_error_response(item)
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        else:
            await self._open(tg, send)
        while item is not _END:
            if isinstance(item, WireError):
                await self._send(send, error_frame(item))
                break
            if type(item) is TapeResponse and item.tape.ends_call:
                # The run ended and did not fail: the stream's end goes in the same write
                # as its last frames, not after the run loop's clean-up (the client waits
                # for it to reuse the connection and start its next turn). The source is
                # closed after, as when a client leaves (``__call__``).
                await self._send(send, sse_frame(item), more=False)
                return
            await self._send(send, sse_frame(item))
            try:
                item = await anext(self._source)
            except StopAsyncIteration:
                item = _END
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                item = to_wire(exc, request_id=self._request_id)
        await self._send(send, b"", more=False)

    async def _open(self, tg: asyncio.TaskGroup, send: Send) -> None:
        """The 200 head, then keep-alive comments while the stream idles."""
        await _start(send)
        self._last_send = time.monotonic()
        self._arm_ping(tg, send, self._keepalive)

    async def _send(self, send: Send, chunk: bytes, *, more: bool = True) -> None:
        """A frame (or, ``more=False``, the end of the body) from the stream's task."""
        while self._keepalive_task is not None:  # rare: one went out as the stream woke
            with contextlib.suppress(Exception):  # its failure is the task group's to raise
                await self._keepalive_task
        self._ended = not more
        self._sending = True
        try:
            await send({"type": "http.response.body", "body": chunk, "more_body": more})
        finally:
            self._sending = False
        self._last_send = time.monotonic()

    async def _send_keepalive(self, send: Send) -> None:
        try:
            # The stream may have ended, or begun a frame, since the timer fired.
            if not (self._ended or self._sending):
                await send({"type": "http.response.body", "body": b": keepalive\n\n",
                            "more_body": True})
                self._last_send = time.monotonic()
        finally:
            self._keepalive_task = None

    def _arm_ping(self, tg: asyncio.TaskGroup, send: Send, after: float) -> None:
        def due() -> None:
            idle = time.monotonic() - self._last_send
            if idle < self._keepalive:
                self._arm_ping(tg, send, self._keepalive - idle)
            elif not self._ended:
                # A frame on its way (or a keep-alive still in flight): not idle after all.
                if not (self._sending or self._keepalive_task is not None):
                    self._keepalive_task = tg.create_task(self._send_keepalive(send))
                self._arm_ping(tg, send, self._keepalive)

        self._ping = asyncio.get_running_loop().call_later(after, due)


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


async def _cancel_on_disconnect(receive: Receive, gone: Callable[[], None]) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            gone()
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
