"""HTTP/1.1 connection limits uvicorn does not enforce on its own.

The daemon serves HTTP/1.1 with uvicorn's ``httptools`` protocol (llhttp, in C:
about a fifth of a channel message's CPU went to uvicorn's pure-Python h11
parsing and framing). llhttp bounds nothing: it keeps a header value arriving in
pieces until it ends, and uvicorn has no limit on how long a client may take to
send its head (a slowloris client holds a socket forever) and counts no headers.
This subclass:

- bounds a request head in bytes: a head still unfinished after more than
  ``max_header_bytes`` have arrived for it, or whose request line and headers add up
  to more, is answered 431 with the spec's ``ErrorDetail`` body before the
  application sees it, and the connection is closed (so the parser never holds more
  than one read beyond the limit);
- closes a connection that has not delivered a complete request head within
  ``header_timeout_s`` of connecting or of its previous response;
- leaves counting headers to the application (``app.dispatch``), which sees
  the parsed list and answers 431 the same way;
- keeps two rules of h11's that llhttp lacks: an HTTP/1.1 request without ``Host`` is
  refused 400, and whitespace trailing a header value is not part of it;
- bounds a request body in time: it must arrive whole within ``body_timeout_s``
  and, after the first :data:`RATE_GRACE_S`, at ``body_min_bytes_per_s`` on average;
  otherwise the client gets 408 (unless an answer was already started) and the
  connection is closed. uvicorn alone keeps such a connection open forever: each
  trickled byte re-arms its keep-alive timer, even after the app has answered (the
  watch goes on after an early answer, such as a 401 or 413, until the body is in).

It also tells a response that the connection is gone without a task to watch for it
(:data:`ON_DISCONNECT`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httptools
import msgspec
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from palyra.core.errors import ErrorCode, PalyraError
from palyra.transport.errors import to_wire
from palyra.transport.http._asgi import BODY_DEADLINE, ON_DISCONNECT

_json = msgspec.json.Encoder()


def too_large_body(max_bytes: int) -> bytes:
    """The ``ErrorDetail`` JSON of a refused request head."""
    wire = to_wire(PalyraError(f"request line and headers exceed {max_bytes} bytes",
                               code=ErrorCode.HEADERS_TOO_LARGE,
                               details={"limit_bytes": str(max_bytes)}))
    return _json.encode(wire.http_body())


RATE_GRACE_S = 5.0
"""A body's first seconds are not held to the minimum rate (connection set-up, slow start)."""


def _error_body(error: PalyraError) -> bytes:
    return _json.encode(to_wire(error).http_body())


def body_too_slow(timeout_s: float, min_rate: float) -> PalyraError:
    """The 408 of a body that missed its deadline or its minimum rate."""
    return PalyraError(f"the request body did not arrive within {timeout_s:g} s at "
                       f"{min_rate:g} bytes/s or more", code=ErrorCode.REQUEST_TIMEOUT,
                       details={"timeout_s": f"{timeout_s:g}", "min_bytes_per_s": f"{min_rate:g}"})


def too_slow(elapsed_s: float, received: int, timeout_s: float, min_rate: float) -> bool:
    """Whether a body ``received`` bytes into ``elapsed_s`` seconds has failed its bounds."""
    return elapsed_s >= timeout_s or (elapsed_s >= RATE_GRACE_S
                                      and received < min_rate * elapsed_s)


class HeadWithBody(asyncio.Transport):
    """A response's writes as uvicorn makes them, its head held until its body comes.

    uvicorn writes a response's head and its body separately: two ``send()`` calls,
    two loopback segments and two wake-ups of the client per answer (``TCP_NODELAY``
    is on, see ``daemon/listen.py``). The head is held here and goes out with the
    first body write made in the same turn of the loop; a streamed response (SSE)
    whose body comes later gets its head at the end of that turn. Once the head is out
    it hands the response's ``cycle`` its transport back.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop,
                 cycle: Any = None) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._cycle = cycle
        self._held: bytes | None = None
        self._first = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._first:  # the head: hold it for the body
            self._first, self._held = False, bytes(data)
            self._loop.call_soon(self._flush)
            return
        if self._held is not None:
            data, self._held = self._held + bytes(data), None
            self._step_aside()
        self._transport.write(data)

    def _flush(self) -> None:
        if self._held is not None and not self._transport.is_closing():
            held, self._held = self._held, None
            self._transport.write(held)
            self._step_aside()

    def _step_aside(self) -> None:
        # The head is out: the response's later writes (an SSE stream's every frame) go
        # to the transport itself, not through one more call here each.
        if self._cycle is not None and self._cycle.transport is self:
            self._cycle.transport = self._transport

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()


class _HeadTooLarge(Exception):
    """Raised from a parser callback to stop parsing a head past the limit."""


class _NoHost(Exception):
    """Raised from a parser callback: an HTTP/1.1 request without ``Host`` (RFC 9112 3.2)."""


_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


def bounded_protocol(header_timeout_s: float, max_header_bytes: int,
                     body_timeout_s: float = 30.0,
                     body_min_bytes_per_s: float = 1024.0) -> type[HttpToolsProtocol]:
    """An ``HttpToolsProtocol`` class with the head bound, the head and body timeouts,
    and the 431/408 answers."""

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        # Where the connection is: waiting for (or inside) a request head; past the
        # head of a request whose body is still arriving; else neither (the app is
        # answering a complete request).
        _in_head = True
        _in_body = False
        _head_bytes = 0  # raw bytes read for the open head (whole reads)
        _head_size = 0  # the head's line and headers as parsed so far
        _host = False  # the head has a Host header (h11 refused HTTP/1.1 without one)
        _head_timer: asyncio.TimerHandle | None = None
        _body_timer: asyncio.TimerHandle | None = None
        _body_started = 0.0
        _body_bytes = 0
        _lost = False
        _on_lost: dict[int, Callable[[], None]] | None = None  # the watches (ON_DISCONNECT)

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def _watch_lost(self, callback: Callable[[], None]) -> Callable[[], None]:
            if self._lost:
                handle = self.loop.call_soon(callback)
                return handle.cancel
            if self._on_lost is None:
                self._on_lost = {}
            watches, key = self._on_lost, id(callback)
            watches[key] = callback

            def unwatch() -> None:
                watches.pop(key, None)
            return unwatch

        def data_received(self, data: bytes) -> None:
            head_at_start = self._in_head
            if head_at_start:
                self._head_bytes += len(data)
            elif self._in_body:
                self._body_bytes += len(data)
            self._unset_keepalive_if_required()
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserError as exc:
                if isinstance(exc.__context__, _HeadTooLarge):
                    self._send_error(431, too_large_body(max_header_bytes))
                else:  # as uvicorn answers it (and a missing Host, as h11 did)
                    self.logger.warning("Invalid HTTP request received.")
                    self.send_400_response("Invalid HTTP request received.")
                return
            except httptools.HttpParserUpgrade:
                if self._should_upgrade():  # as uvicorn does
                    self.handle_websocket_upgrade()
                else:
                    self._unsupported_upgrade_warning()
                return
            if self.transport.is_closing():
                return
            if self._in_head and head_at_start and self._head_bytes > max_header_bytes:
                # Still no end of head after more than the limit: refuse before the
                # parser buffers any more of it.
                self._send_error(431, too_large_body(max_header_bytes))
                return
            if self._in_head:
                self._arm()  # between requests, or still waiting for a whole head
            else:
                self._disarm()  # the head is in
            if self._in_body and self._body_timer is None:
                self._body_started, self._body_bytes = self.loop.time(), 0
                self._body_timer = self.loop.call_later(1.0, self._check_body)

        # -- parser callbacks --------------------------------------------------------
        def on_message_begin(self) -> None:
            super().on_message_begin()
            # The app's fronts read the body under this protocol's deadline alone, and
            # learn that the client left from it (no watcher task of their own).
            extensions: dict[str, Any] = {BODY_DEADLINE: {"timeout_s": body_timeout_s},
                                          ON_DISCONNECT: self._watch_lost}
            self.scope["extensions"] = extensions
            self._in_head, self._in_body = True, False
            self._head_size, self._host = 0, False

        def on_url(self, url: bytes) -> None:
            self._grow_head(len(url) + 16)  # method, spaces, "HTTP/1.1", CRLF
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            # _grow_head inlined: this runs for every header of every request.
            self._head_size += len(name) + len(value) + 4  # ": " and CRLF
            if self._head_size > max_header_bytes:
                raise _HeadTooLarge
            if len(name) == 4 and name.lower() == b"host":
                self._host = True
            # Whitespace around a value is not part of it (RFC 9110 5.5); llhttp drops
            # what leads but keeps what trails (h11 dropped both).
            super().on_header(name, value.rstrip(b" \t"))

        def on_headers_complete(self) -> None:
            if not self._host and self.parser.get_http_version() == "1.1":
                raise _NoHost
            self._in_head, self._in_body = False, True
            self._head_bytes = 0
            super().on_headers_complete()
            cycle = self.cycle
            if cycle is not None and cycle.transport is self.transport:
                cycle.transport = HeadWithBody(self.transport, self.loop, cycle)

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._in_body = False
            self._stop_body_watch()

        def _grow_head(self, size: int) -> None:
            self._head_size += size
            if self._head_size > max_header_bytes:
                raise _HeadTooLarge

        # -- connection ----------------------------------------------------------------
        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._stop_body_watch()
            super().connection_lost(exc)
            self._lost = True
            watches, self._on_lost = self._on_lost, None
            for callback in (watches or {}).values():
                callback()

        def on_response_complete(self) -> None:
            pipelined = bool(self.pipeline)  # the app's next request is already in
            super().on_response_complete()
            # A body still arriving after the answer (a 401 or 413 sent early) is read and
            # dropped while the body watch goes on: closing now could reset the socket
            # before the client has read the answer; a slow one is closed by the watch.
            if not self._in_body and not pipelined:
                self._in_head = True
                self._arm()

        def _check_body(self) -> None:
            self._body_timer = None
            if not self._in_body or self.transport.is_closing():
                return
            elapsed = self.loop.time() - self._body_started
            if not too_slow(elapsed, self._body_bytes, body_timeout_s, body_min_bytes_per_s):
                self._body_timer = self.loop.call_later(1.0, self._check_body)
                return
            cycle = self.cycle
            if cycle is None or not cycle.response_started:
                self._send_error(408, _error_body(
                    body_too_slow(body_timeout_s, body_min_bytes_per_s)))
            else:
                self.transport.close()

        def _stop_body_watch(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None

        def _send_error(self, status: int, body: bytes) -> None:
            """Answer on the wire directly (the request is mid-message) and close; the
            app's own answer, if it comes, finds the connection gone."""
            self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
                                 b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
                                 % (status, _REASONS[status], len(body), body))
            if self.cycle is not None:
                self.cycle.disconnected = True  # the app's answer must not follow it
            self._stop_body_watch()
            self._disarm()
            self.transport.close()

        def _arm(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(header_timeout_s, self._head_timeout)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timeout(self) -> None:
            self._head_timer = None
            if self._in_head and not self.transport.is_closing():
                self.transport.close()

    return BoundedHttpToolsProtocol
