"""The ingress bench's sender: pre-encoded HTTP/1.1 POSTs over kept-alive connections.

The load generator shares the daemon's cores, so every microsecond it spends per request is
taken from the daemon it measures. ``httpx.AsyncClient`` built a request, merged headers,
walked auth and redirects and ran a cookie jar per POST: about as much CPU as the daemon's
admission it was timing. Here each delivery is encoded to its bytes before the clock
starts, and a POST is one ``write`` of them and llhttp (``httptools``, the daemon's own
parser) reading the answer, on a pool of connections kept alive.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httptools
import msgspec


def encode_post(host: str, path: str, headers: dict[str, str], body: bytes) -> bytes:
    """One POST's bytes (the head's header names as given, Content-Length added)."""
    head = [f"POST {path} HTTP/1.1", f"host: {host}", f"content-length: {len(body)}"]
    head += [f"{name}: {value}" for name, value in headers.items()
             if name.lower() not in ("host", "content-length")]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class _Connection(asyncio.Protocol):
    """One kept-alive connection: at most one request in flight."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[None] | None = None
        self._body: list[bytes] = []
        self.status = 0
        self.keep_alive = True
        self.lost: Exception | None = None
        self.answered = False  # a byte of the current exchange's answer arrived

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.answered = True
        self._parser.feed_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc or ConnectionError("connection closed")
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(self.lost)

    # httptools' callbacks
    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self.keep_alive = self._parser.should_keep_alive()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def exchange(self, data: bytes) -> tuple[int, bytes]:
        assert self.transport is not None
        self._body = []
        self.answered = False
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        try:
            await self._waiter
        finally:
            self._waiter = None
        return self.status, b"".join(self._body)


class RawClient:
    """POSTs pre-encoded requests to one server; connections are pooled and reused."""

    def __init__(self, host: str, port: int, timeout_s: float = 30.0) -> None:
        self._host, self._port, self._timeout = host, port, timeout_s
        self._idle: list[_Connection] = []
        self._all: list[_Connection] = []

    async def _connection(self) -> tuple[_Connection, bool]:
        """A connection, and whether it was kept alive from an earlier request."""
        while self._idle:
            conn = self._idle.pop()
            if conn.lost is None and conn.keep_alive:
                return conn, True
        return await self._new(), False

    async def _new(self) -> _Connection:
        _, conn = await asyncio.get_running_loop().create_connection(
            _Connection, self._host, self._port)
        self._all.append(conn)
        return conn

    async def post(self, data: bytes) -> tuple[int, dict[str, Any] | str]:
        """The status and the decoded JSON answer (its text when it is not JSON).

        A kept-alive connection the server closes as idle just as it is reused
        (closed with no byte of an answer) is replaced and the request sent again,
        as HTTP clients do with a stale pooled connection: the server did not take
        it up (and a webhook sender retries anyway; the daemon dedupes).
        """
        conn, reused = await self._connection()
        async with asyncio.timeout(self._timeout):
            try:
                status, body = await conn.exchange(data)
            except ConnectionError:
                if not reused or conn.answered:
                    raise
                conn = await self._new()  # the pool's others are as old as it was
                status, body = await conn.exchange(data)
        if conn.keep_alive and conn.lost is None:
            self._idle.append(conn)
        elif conn.transport is not None:
            conn.transport.close()
        try:
            return status, msgspec.json.decode(body)
        except msgspec.DecodeError:
            return status, body.decode(errors="replace")

    def close(self) -> None:
        for conn in self._all:
            if conn.transport is not None:
                conn.transport.close()
        self._all.clear()
        self._idle.clear()
