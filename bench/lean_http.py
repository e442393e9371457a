"""A lean HTTP/1.1 keep-alive client for the bench: the same requests and SSE frames as httpx.

The bench's HTTP driver uses httpx and httpx-sse, as a Python client would. At
C=16 that client spends about as much CPU per step as the daemon's whole HTTP
layer, on the same shared cores, and its event loop is busy often enough to
delay the frames it reads. This client speaks the same protocol (the same
request lines, headers and JSON bodies; the SSE answer read frame by frame as
it arrives, chunked or sized) with nothing else: one ``asyncio`` stream per
connection, a free list of idle connections, no timeouts, no cookies, no
redirects. It is bench code only: ``--http-client lean`` measures how much of
the HTTP figures is the client's (bench/results/README.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from bench import http_trace

_encode = msgspec.json.Encoder().encode
_MAX_HEAD = 64 * 1024


class HttpError(RuntimeError):
    """A non-2xx answer: its status and body."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}: {body[:500]!r}")
        self.status = status


class _Connection:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer


class LeanClient:
    """Keep-alive connections to one ``host:port``; JSON requests and SSE streams."""

    def __init__(self, host: str, port: int, headers: dict[str, str]) -> None:
        self._host = host
        self._port = port
        self._head = "".join(f"{k}: {v}\r\n" for k, v in
                             {"host": f"{host}:{port}", **headers}.items())
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()
        # BENCH_HTTP_TRACE: each request carries its send time, each chunk's arrival is
        # kept (bench/http_trace.py joins them with the daemon's stamps).
        self._trace = http_trace.enabled()
        if self._trace:
            http_trace.start_dump_at_exit()

    async def _connect(self) -> _Connection:
        if self._idle:
            return self._idle.pop()
        reader, writer = await asyncio.open_connection(self._host, self._port)
        conn = _Connection(reader, writer)
        self._all.add(conn)
        return conn

    def _release(self, conn: _Connection, reusable: bool) -> None:
        if reusable:
            self._idle.append(conn)
        else:
            self._all.discard(conn)
            conn.writer.close()

    async def _send(self, method: str, path: str, body: Any,
                    headers: dict[str, str] | None) -> tuple[_Connection, int, dict[bytes, bytes]]:
        conn = await self._connect()
        payload = _encode(body)
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        if self._trace:
            extra += f"{http_trace.HEADER}: {http_trace.now()}\r\n"
        conn.writer.write(
            f"{method} {path} HTTP/1.1\r\n{self._head}{extra}content-type: application/json\r\n"
            f"content-length: {len(payload)}\r\n\r\n".encode() + payload)
        head = await conn.reader.readuntil(b"\r\n\r\n")
        if len(head) > _MAX_HEAD:
            raise HttpError(0, head[:200])
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        fields: dict[bytes, bytes] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(b":")
                fields[name.strip().lower()] = value.strip()
        return conn, status, fields

    async def _body_chunks(self, conn: _Connection, fields: dict[bytes, bytes]
                           ) -> AsyncIterator[bytes]:
        reader = conn.reader
        if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
            while True:
                size = int((await reader.readuntil(b"\r\n"))[:-2].split(b";", 1)[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")  # no trailers are sent
                    return
                chunk = await reader.readexactly(size + 2)
                yield chunk[:-2]
        else:
            length = int(fields.get(b"content-length", b"0"))
            if length:
                yield await reader.readexactly(length)

    async def request(self, method: str, path: str, body: Any,
                      headers: dict[str, str] | None = None) -> bytes:
        """One request with a JSON body; the whole answer's body (raises on non-2xx)."""
        conn, status, fields = await self._send(method, path, body, headers)
        data = b"".join([chunk async for chunk in self._body_chunks(conn, fields)])
        self._release(conn, fields.get(b"connection", b"").lower() != b"close")
        if not 200 <= status < 300:
            raise HttpError(status, data)
        return data

    async def sse(self, method: str, path: str, body: Any) -> AsyncIterator[tuple[str, bytes]]:
        """One request whose answer is SSE: each frame's ``(event, data)`` as it arrives."""
        conn, status, fields = await self._send(method, path, body, None)
        done = False
        try:
            if not 200 <= status < 300:
                data = b"".join([chunk async for chunk in self._body_chunks(conn, fields)])
                raise HttpError(status, data)
            pending = b""
            async for chunk in self._body_chunks(conn, fields):
                if self._trace:
                    http_trace.record("r", http_trace.now(), chunk)
                pending += chunk
                *frames, pending = pending.split(b"\n\n")
                for frame in frames:
                    event, data = "message", b""
                    for line in frame.split(b"\n"):
                        if line.startswith(b"data: "):
                            data = line[6:]
                        elif line.startswith(b"event: "):
                            event = line[7:].decode()
                    if data:
                        yield event, data
            done = True
        finally:
            # A stream left before its end cannot be reused: its rest is still coming.
            self._release(conn, done and fields.get(b"connection", b"").lower() != b"close")

    async def aclose(self) -> None:
        """Close every connection."""
        for conn in list(self._all):
            conn.writer.close()
            with contextlib.suppress(OSError):
                await conn.writer.wait_closed()
        self._all.clear()
        self._idle.clear()
