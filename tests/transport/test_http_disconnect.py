"""The daemon's HTTP protocol tells a response that its client left (``ON_DISCONNECT``).

An SSE response under it needs no task blocked in ``receive()`` to learn that: the
protocol calls back when the connection is lost. Real uvicorn on a loopback listener.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import betterproto2
import httpx
import pytest
from palyra_gen.palyra import v1

from palyra.transport.http import HttpGateway
from palyra.transport.http._asgi import ON_DISCONNECT
from palyra.transport.http._sse import SseResponse
from tests.transport._served import served_by_gateway

EVENT = v1.WatchRunResponse(event=v1.TapeEvent(run_id="r", tape_seq=1,
                                               user_input=v1.UserInput(text="hi")))


class App:
    """``/watch``: watches for the client's leaving (once before, once after it left, as
    told) and answers a head and one frame; ``/sse``: an SSE stream that never ends."""

    def __init__(self) -> None:
        self.called: list[str] = []
        self.seen_gone = asyncio.Event()  # the first watch was called
        self.left = asyncio.Event()  # set by the test once the server saw the client go
        self.watched_late = asyncio.Event()
        self.stream_closed = asyncio.Event()
        self.streaming = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any],
                       send: Callable[..., Any]) -> None:
        if scope["path"] == "/sse":
            await SseResponse(self._never_ending(), error_grace_s=0.01, keepalive_s=10.0,
                              request_id="q")(scope, receive, send)
            return
        watch = scope["extensions"][ON_DISCONNECT]
        def watched() -> None:
            self.called.append("watched")
            self.seen_gone.set()

        watch(watched)
        unwatch = watch(lambda: self.called.append("unwatched"))
        unwatch()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x", "more_body": True})
        await self.left.wait()
        watch(lambda: self.called.append("late"))
        await asyncio.sleep(0)  # called soon, not at once
        self.watched_late.set()

    async def _never_ending(self) -> AsyncIterator[betterproto2.Message]:
        try:
            yield EVENT
            self.streaming.set()
            await asyncio.sleep(30)
        finally:
            self.stream_closed.set()


@pytest.fixture
async def served() -> AsyncIterator[tuple[App, HttpGateway, int]]:
    app = App()
    async with served_by_gateway(app) as (http, port):
        yield app, http, port


async def test_a_watch_is_called_when_the_client_leaves(
        served: tuple[App, HttpGateway, int]) -> None:
    app, _http, port = served
    async with (asyncio.timeout(5),
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client):
        async with client.stream("GET", "/watch") as answer:
            assert await anext(answer.aiter_raw()) == b"x"
        await client.aclose()
        await app.seen_gone.wait()
        assert app.called == ["watched"]  # the unwatched one is not called
        app.left.set()
        await app.watched_late.wait()
    # Watched after the connection went: called as soon as the loop comes round.
    assert app.called == ["watched", "late"]


async def test_an_sse_stream_ends_when_its_client_leaves_without_a_watcher_task(
        served: tuple[App, HttpGateway, int]) -> None:
    app, _http, port = served
    async with (asyncio.timeout(5),
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client):
        async with client.stream("GET", "/sse") as answer:
            assert b"user_input" in await anext(answer.aiter_raw())
            await app.streaming.wait()
            # The protocol's watch stands in for a task blocked in receive().
            assert not [t for t in asyncio.all_tasks()
                        if "_cancel_on_disconnect" in repr(t.get_coro())]
        await client.aclose()
        await app.stream_closed.wait()
