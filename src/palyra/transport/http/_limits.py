"""HTTP/1.1 connection limits uvicorn does not enforce on its own.

uvicorn's h11 protocol bounds the bytes it buffers for one request head
(``h11_max_incomplete_event_size``) but answers an over-long head with a bare
400, has no limit on how long a client may take to send its head (a slowloris
client holds a socket forever) and counts no headers. This subclass:

- answers an over-long head with 431 and the spec's ``ErrorDetail`` body;
- closes a connection that has not delivered a complete request head within
  ``header_timeout_s`` of connecting or of its previous response;
- leaves counting headers to the application (``app.dispatch``), which sees
  the parsed list and answers 431 the same way;
- bounds a request body in time: it must arrive whole within ``body_timeout_s``
  and, after the first :data:`RATE_GRACE_S`, at ``body_min_bytes_per_s`` on average;
  otherwise the client gets 408 (unless an answer was already started) and the
  connection is closed. uvicorn alone keeps such a connection open forever: each
  trickled byte re-arms its keep-alive timer, even after the app has answered (the
  watch goes on after an early answer, such as a 401 or 413, until the body is in).
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
import msgspec
from uvicorn.protocols.http.h11_impl import H11Protocol

from palyra.core.errors import ErrorCode, PalyraError
from palyra.transport.errors import to_wire

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


def bounded_protocol(header_timeout_s: float, max_header_bytes: int,
                     body_timeout_s: float = 30.0,
                     body_min_bytes_per_s: float = 1024.0) -> type[H11Protocol]:
    """An ``H11Protocol`` class with the head and body timeouts and the 431/408 answers."""

    class BoundedH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _body_timer: asyncio.TimerHandle | None = None
        _body_started = 0.0
        _body_bytes = 0

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self.conn.their_state is h11.IDLE and self._head_too_long(data):
                self._send_431()
                return
            if self._body_timer is not None:
                self._body_bytes += len(data)
            super().data_received(data)
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._arm()  # between requests, or still waiting for a whole head
            else:
                self._disarm()  # the head is in
            if self.conn.their_state is h11.SEND_BODY and self._body_timer is None:
                self._body_started, self._body_bytes = self.loop.time(), 0
                self._body_timer = self.loop.call_later(1.0, self._check_body)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._stop_body_watch()
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # A body still arriving after the answer (a 401 or 413 sent early) is read and
            # dropped while the body watch goes on: closing now could reset the socket
            # before the client has read the answer; a slow one is closed by the watch.
            self._arm()

        def _check_body(self) -> None:
            self._body_timer = None
            if self.conn.their_state is not h11.SEND_BODY or self.transport.is_closing():
                return
            elapsed = self.loop.time() - self._body_started
            if not too_slow(elapsed, self._body_bytes, body_timeout_s, body_min_bytes_per_s):
                self._body_timer = self.loop.call_later(1.0, self._check_body)
                return
            cycle = self.cycle
            if cycle is None or not cycle.response_started:
                self._send_error(408, b"Request Timeout", _error_body(
                    body_too_slow(body_timeout_s, body_min_bytes_per_s)))
            else:
                self.transport.close()

        def _stop_body_watch(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None

        def _head_too_long(self, data: bytes) -> bool:
            # h11 bounds only a head that arrives in pieces; one that arrives
            # whole in a single read is parsed at any size, so measure it here.
            buffered = bytes(self.conn.trailing_data[0]) + data
            end = buffered.find(b"\r\n\r\n")
            return (end + 4 if end >= 0 else len(buffered)) > max_header_bytes

        def send_400_response(self, msg: str) -> None:
            # h11 refuses a head over max_incomplete_event_size as a protocol error.
            if len(self.conn.trailing_data[0]) >= max_header_bytes:
                self._send_431()
                return
            super().send_400_response(msg)

        def _send_431(self) -> None:
            self._send_error(431, b"Request Header Fields Too Large",
                             too_large_body(max_header_bytes))

        def _send_error(self, status: int, reason: bytes, body: bytes) -> None:
            """Answer on a fresh state machine (the request's is mid-message) and close;
            the app's own answer, if it comes, finds the connection gone."""
            headers = [(b"content-type", b"application/json"), (b"connection", b"close"),
                       (b"content-length", str(len(body)).encode())]
            conn = h11.Connection(h11.SERVER)
            conn.receive_data(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            conn.next_event()
            self.transport.write(conn.send(h11.Response(status_code=status, headers=headers,
                                                        reason=reason)))
            self.transport.write(conn.send(h11.Data(data=body)))
            self._stop_body_watch()
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
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return BoundedH11Protocol
