"""A response leaves the HTTP listener in one write, and a streamed head is not held back.

uvicorn writes a response's head and body separately; the daemon's protocol joins them
(``HeadWithBody``), so an answer costs one ``send()`` and one wake-up of its client. A
response whose body comes later (SSE) still gets its head at once. Real uvicorn on a
loopback listener; the connection's own transport counts the writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from palyra.transport.http import HttpGateway
from tests.transport._served import served_by_gateway

BODY = b'{"ok":true}'


class App:
    """Answers ``/now`` at once and ``/later`` only once :attr:`release` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.scopes: list[dict[str, Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any],
                       send: Callable[..., Any]) -> None:
        assert scope["type"] == "http"
        self.scopes.append(scope)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(BODY)).encode())]})
        if scope["path"] == "/stream":  # a frame now, the rest once released
            await send({"type": "http.response.body", "body": BODY[:1], "more_body": True})
            await self.release.wait()
            await send({"type": "http.response.body", "body": BODY[1:]})
            return
        if scope["path"] == "/later":
            await self.release.wait()
        await send({"type": "http.response.body", "body": BODY})


@pytest.fixture
async def served() -> AsyncIterator[tuple[App, HttpGateway, int]]:
    app = App()
    async with served_by_gateway(app) as (http, port):
        yield app, http, port


async def test_a_response_is_one_write(served: tuple[App, HttpGateway, int]) -> None:
    _app, http, port = served
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        assert (await client.get("/now")).content == BODY  # opens the keep-alive connection
        (conn,) = http._server.server_state.connections
        transport: Any = conn.transport
        writes: list[bytes] = []
        real_write = transport.write

        def counting(data: bytes) -> None:
            writes.append(bytes(data))
            real_write(data)

        transport.write = counting
        answer = await client.get("/now")
    assert (answer.status_code, answer.content) == (200, BODY)
    assert len(writes) == 1 and writes[0].startswith(b"HTTP/1.1 200") \
        and writes[0].endswith(BODY)


async def test_a_head_whose_body_comes_later_is_sent_at_once(
        served: tuple[App, HttpGateway, int]) -> None:
    app, _http, port = served
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        async with asyncio.timeout(5):
            async with client.stream("GET", "/later") as answer:
                assert answer.status_code == 200  # the head came with the body still held
                app.release.set()
                assert await answer.aread() == BODY


async def test_forwarded_headers_are_not_believed(served: tuple[App, HttpGateway, int]) -> None:
    """A loopback client is no proxy: ``X-Forwarded-*`` leave the scope's client and scheme
    as the socket says (uvicorn's default rewrites them for 127.0.0.1, in a middleware
    every request's task passes through; nothing in the daemon reads either)."""
    app, _http, port = served
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        answer = await client.get("/now", headers={"x-forwarded-for": "203.0.113.7",
                                                   "x-forwarded-proto": "https"})
    assert answer.status_code == 200
    (scope,) = app.scopes
    assert scope["client"][0] == "127.0.0.1" and scope["scheme"] == "http"


async def test_a_stream_writes_past_the_held_head_once_it_is_out(
        served: tuple[App, HttpGateway, int]) -> None:
    """Once the head went out with the first frame, a stream's later frames are written to
    the connection's transport directly, not through the head-holding wrapper (a call
    saved on every SSE frame)."""
    app, http, port = served
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        async with asyncio.timeout(5):
            async with client.stream("GET", "/stream") as answer:
                chunks = answer.aiter_raw()
                assert await anext(chunks) == BODY[:1]
                (conn,) = http._server.server_state.connections
                cycle: Any = conn.cycle
                assert cycle.transport is conn.transport
                app.release.set()
                assert b"".join([chunk async for chunk in chunks]) == BODY[1:]
