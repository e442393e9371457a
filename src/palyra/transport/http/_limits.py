"""HTTP/1.1 connection limits uvicorn does not enforce on its own.

uvicorn's h11 protocol bounds the bytes it buffers for one request head
(``h11_max_incomplete_event_size``) but answers an over-long head with a bare
400, has no limit on how long a client may take to send its head (a slowloris
client holds a socket forever) and counts no headers. This subclass:

- answers an over-long head with 431 and the spec's ``ErrorDetail`` body;
- closes a connection that has not delivered a complete request head within
  ``header_timeout_s`` of connecting or of its previous response;
- leaves counting headers to the application (``app.dispatch``), which sees
  the parsed list and answers 431 the same way.
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


def bounded_protocol(header_timeout_s: float, max_header_bytes: int) -> type[H11Protocol]:
    """An ``H11Protocol`` class with the head timeout and the 431 answer."""

    class BoundedH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self.conn.their_state is h11.IDLE and self._head_too_long(data):
                self._send_431()
                return
            super().data_received(data)
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._arm()  # between requests, or still waiting for a whole head
            else:
                self._disarm()  # the head is in: the app's body timeout takes over

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

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
            body = too_large_body(max_header_bytes)
            headers = [(b"content-type", b"application/json"), (b"connection", b"close"),
                       (b"content-length", str(len(body)).encode())]
            conn = h11.Connection(h11.SERVER)  # the client's state machine is broken
            conn.receive_data(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            conn.next_event()
            self.transport.write(conn.send(h11.Response(status_code=431, headers=headers,
                                                        reason=b"Request Header Fields Too Large")))
            self.transport.write(conn.send(h11.Data(data=body)))
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
