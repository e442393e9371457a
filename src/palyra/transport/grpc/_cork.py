"""Write coalescing for gRPC connections: one ``send()`` per connection per loop iteration
(and received DATA frames taken without h2's parser, ``_inbound``).

grpclib writes every HTTP/2 frame group to the transport as soon as h2 has
built it: a unary call answers with three writes (headers, message,
trailers), and each is a ``send()`` syscall on loopback that costs more CPU
than the frames themselves. :class:`CorkedTransport` keeps the writes made
while one event-loop iteration runs and hands them to the real transport
joined, once, from a callback scheduled for the next iteration. Order is
kept (every write goes through the cork), so the byte stream is exactly what
grpclib wrote; only the number of syscalls changes. The listener and the
clients (``CorkedChannel``) use the same cork.

Why the flush is not put off further, e.g. until the loop has nothing else
ready: that was measured (tool-loop over gRPC, C=16) and halves the sends
again (0.40 -> 0.24 per step, -9 % daemon CPU per step), but every frame then
leaves up to an iteration later, clients start their next call later, and
the daemon sat idle 15 % of the time: -10 to -15 % steps/s.

Memory stays bounded as without the cork: the cork never holds more than
:data:`FLUSH_AT` bytes (a write that takes it past that goes to the real
transport at once), and grpclib still waits on the real transport's
``pause_writing``/``resume_writing`` (they reach the protocol unchanged) and on
HTTP/2 flow control before each write; so a slow reader is paused at the same
high-water mark as before, and the cork empties before the loop polls for I/O.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from grpclib.protocol import H2Protocol

from palyra.transport.grpc._hpack import remember_encoding, remember_headers
from palyra.transport.grpc._inbound import data_events

FLUSH_AT = 64 * 1024
"""Most bytes the cork holds; past this a write is handed on at once (backpressure as before)."""


class CorkedTransport(asyncio.Transport):
    """An ``asyncio.Transport`` that joins the writes of one loop iteration into one."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._scheduled = False

    # -- writing ----------------------------------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Queue ``data``; it goes out with the rest of this iteration's writes."""
        if not data:
            return
        self._pending.append(bytes(data))
        self._pending_bytes += len(data)
        if self._pending_bytes > FLUSH_AT:
            self.flush()  # big writes meet the real transport's high-water mark now
        elif not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def writelines(self, list_of_data: Any) -> None:
        """Queue each item, as :meth:`write`."""
        for data in list_of_data:
            self.write(data)

    def flush(self) -> None:
        """Hand everything queued to the real transport now, as one write.

        Also the callback :meth:`write` schedules (no wrapper: one call fewer a send), so it
        clears the mark; a flush made earlier by hand leaves that callback nothing to do.
        """
        self._scheduled = False
        pending = self._pending
        if not pending:
            return
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        pending.clear()
        self._pending_bytes = 0
        if not self._transport.is_closing():
            self._transport.write(data)

    def pending_bytes(self) -> int:
        """Bytes queued and not yet handed to the real transport."""
        return self._pending_bytes

    def get_write_buffer_size(self) -> int:
        """The real transport's buffer plus what the cork holds."""
        return self._transport.get_write_buffer_size() + self.pending_bytes()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        """The real transport's high/low water marks."""
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """Set the real transport's high/low water marks."""
        self._transport.set_write_buffer_limits(high, low)

    def can_write_eof(self) -> bool:
        """Whether the real transport can half-close."""
        return self._transport.can_write_eof()

    def write_eof(self) -> None:
        """Flush, then half-close."""
        self.flush()
        self._transport.write_eof()

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        """Flush what is queued (the last frames, e.g. GOAWAY), then close."""
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        """Drop what is queued and abort the connection."""
        self._pending.clear()
        self._pending_bytes = 0
        self._transport.abort()

    def is_closing(self) -> bool:
        """Whether the real transport is closing."""
        return self._transport.is_closing()

    # -- pass-through -----------------------------------------------------------------------
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The real transport's extra info (socket, peername, ...)."""
        return self._transport.get_extra_info(name, default)

    def is_reading(self) -> bool:
        """Whether the real transport is reading."""
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        """Pause the real transport's reading."""
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        """Resume the real transport's reading."""
        self._transport.resume_reading()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """Set the real transport's protocol."""
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        """The real transport's protocol."""
        return self._transport.get_protocol()


class CorkedH2Protocol(H2Protocol):
    """grpclib's HTTP/2 protocol (listener or client) writing through a :class:`CorkedTransport`,
    taking plain DATA frames without h2's frame parser (:func:`data_events`) and answering
    header blocks it has decoded or encoded before from memory (``_hpack``)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Wrap ``transport`` (grpclib sets TCP_NODELAY through it) and start HTTP/2."""
        # Not an isinstance check: uvloop's transports (the daemon's loop) do not derive
        # from asyncio.Transport, though they have all of its methods.
        real = cast(asyncio.Transport, transport)
        super().connection_made(CorkedTransport(real, asyncio.get_running_loop()))
        h2 = self.connection._connection  # nothing received yet: the table is still empty
        h2.decoder = remember_headers(h2.decoder)
        h2.encoder = remember_encoding(h2.encoder)  # nothing sent yet either

    def data_received(self, data: bytes) -> None:
        """Hand grpclib the events h2 would make of ``data``: read here when it is plain DATA
        frames (``_inbound``), by h2 otherwise (grpclib's own ``data_received``)."""
        connection = getattr(self, "connection", None)  # set by connection_made
        events = None if connection is None else data_events(connection._connection, data)
        if connection is None or events is None:
            super().data_received(data)
            return
        process = self.processor.process
        for event in events:
            process(event)
        connection.flush()  # as grpclib does after its events (an ack may have queued frames)
