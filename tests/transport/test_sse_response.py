"""The SSE response's timing contract, driven through its ASGI interface.

An error within the grace window is a plain HTTP error; past it the 200 head is out
(sent when the window closes, not when the first event comes) and an error is an
``event: error`` frame; keep-alive comments go only while the stream idles, and
nothing follows the stream's end.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import betterproto2
from palyra_gen.palyra import v1

from palyra.app import TapeBatch
from palyra.app._tape import run_stream_responses
from palyra.core.errors import ErrorCode, NotFound
from palyra.journal import StoredEvent
from palyra.transport.http._sse import SseResponse

SCOPE: dict[str, Any] = {"type": "http", "method": "GET", "path": "/v1/runs/r/events"}
EVENT = v1.WatchRunResponse(event=v1.TapeEvent(run_id="r", tape_seq=1,
                                               user_input=v1.UserInput(text="hi")))


class Exchange:
    """One ASGI exchange: what the app sent, when, and a client that may disconnect."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, dict[str, Any]]] = []
        self.gone = asyncio.Event()
        self.t0 = time.monotonic()

    async def send(self, message: Any) -> None:
        self.sent.append((time.monotonic() - self.t0, message))

    async def receive(self) -> Any:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    def kinds(self) -> list[str]:
        out = []
        for _, m in self.sent:
            if m["type"] == "http.response.start":
                out.append(f"start {m['status']}")
            elif not m["more_body"]:
                out.append("end" if not m["body"] else "body")
            elif m["body"].startswith(b": keepalive"):
                out.append("keepalive")
            elif m["body"].startswith(b"event: error"):
                out.append("error")
            else:
                out.append("frame" if m["body"] else "empty")
        return out


async def _serve(source: AsyncIterator[betterproto2.Message], grace: float = 0.05,
                 keepalive: float = 10.0) -> Exchange:
    exchange = Exchange()
    response = SseResponse(source, error_grace_s=grace, keepalive_s=keepalive, request_id="q")
    await asyncio.wait_for(response(SCOPE, exchange.receive, exchange.send), 10)
    return exchange


async def test_an_error_within_the_grace_window_is_a_plain_http_error() -> None:
    async def source() -> AsyncIterator[betterproto2.Message]:
        raise NotFound("no such run")
        yield EVENT

    exchange = await _serve(source())
    assert exchange.kinds() == ["start 404", "body"]
    assert ErrorCode.NOT_FOUND.value.encode() in exchange.sent[1][1]["body"]


async def test_past_the_grace_window_the_head_goes_out_and_an_error_is_a_frame() -> None:
    async def source() -> AsyncIterator[betterproto2.Message]:
        await asyncio.sleep(0.3)
        raise NotFound("no such run")
        yield EVENT

    exchange = await _serve(source(), grace=0.05)
    assert exchange.kinds() == ["start 200", "error", "end"]
    # The head left when the window closed, long before the source answered.
    assert exchange.sent[0][0] < 0.25 <= exchange.sent[1][0]


async def test_a_prompt_stream_is_its_frames_and_its_end() -> None:
    async def source() -> AsyncIterator[betterproto2.Message]:
        yield EVENT
        yield EVENT

    exchange = await _serve(source(), grace=5.0)
    assert exchange.kinds() == ["start 200", "frame", "frame", "end"]
    assert exchange.sent[-1][0] < 1.0  # the grace window is not waited out


async def test_keepalives_only_while_idle_and_none_after_the_end() -> None:
    async def source() -> AsyncIterator[betterproto2.Message]:
        yield EVENT
        await asyncio.sleep(0.35)
        yield EVENT

    exchange = await _serve(source(), grace=0.01, keepalive=0.1)
    kinds = exchange.kinds()
    assert kinds[:2] == ["start 200", "frame"] and kinds[-2:] == ["frame", "end"]
    assert 2 <= kinds.count("keepalive") <= 4, kinds
    await asyncio.sleep(0.25)  # no timer outlives the response
    assert exchange.kinds() == kinds


async def test_a_client_gone_before_the_first_event_closes_the_source() -> None:
    closed = asyncio.Event()

    async def source() -> AsyncIterator[betterproto2.Message]:
        try:
            await asyncio.sleep(30)
            yield EVENT
        finally:
            closed.set()

    exchange = Exchange()
    response = SseResponse(source(), error_grace_s=0.01, keepalive_s=10.0, request_id="q")
    serving = asyncio.create_task(response(SCOPE, exchange.receive, exchange.send))
    await asyncio.sleep(0.05)
    exchange.gone.set()
    await asyncio.wait_for(serving, 5)
    assert closed.is_set()
    assert exchange.kinds() == ["start 200"]


def _tape(member: betterproto2.Message, seq: int) -> betterproto2.Message:
    stored = StoredEvent(position=seq, tape_seq=seq, ts_ms=1, run_id="r", session_id="s",
                         kind="tape.x", payload={}, event_id="e", actor="a", principal="",
                         device_id="", channel="", redactions=[], hash="", prev_hash="",
                         global_hash="")
    (response,) = run_stream_responses(TapeBatch([stored], [member], batched=True))
    return response


async def test_a_run_that_ended_ends_the_stream_with_its_last_frames() -> None:
    """RunStream's batch holding the run's DONE status ends the response in the same
    body message (one write: its frames and the chunked end), without waiting for the
    source to wind down; the source is closed after."""
    closed = asyncio.Event()

    async def source() -> AsyncIterator[betterproto2.Message]:
        try:
            yield _tape(v1.UserInput(text="hi"), 1)
            yield _tape(v1.RunStatus(state=v1.RunState.DONE), 2)
            await asyncio.sleep(30)  # the run loop's clean-up, as slow as it likes
        finally:
            closed.set()

    exchange = Exchange()
    response = SseResponse(source(), error_grace_s=5.0, keepalive_s=10.0, request_id="q")
    await asyncio.wait_for(response(SCOPE, exchange.receive, exchange.send), 5)
    assert exchange.kinds() == ["start 200", "frame", "body"]
    assert b"event: status" in exchange.sent[-1][1]["body"]
    assert closed.is_set()


async def test_a_failed_run_still_ends_with_its_error() -> None:
    async def source() -> AsyncIterator[betterproto2.Message]:
        yield _tape(v1.RunStatus(state=v1.RunState.FAILED), 1)
        raise NotFound("the run failed")

    exchange = await _serve(source(), grace=5.0)
    assert exchange.kinds() == ["start 200", "frame", "error", "end"]


class SlowClient(Exchange):
    """A client that reads slowly: a body message whose bytes start with ``slow`` waits
    ``delay`` seconds in ``send`` (as uvicorn's send waits on flow control)."""

    def __init__(self, slow: bytes, delay: float) -> None:
        super().__init__()
        self.slow, self.delay = slow, delay
        self.in_send = 0
        self.most_in_send = 0

    async def send(self, message: Any) -> None:
        self.in_send += 1
        self.most_in_send = max(self.most_in_send, self.in_send)
        try:
            if message.get("body", b"").startswith(self.slow):
                await asyncio.sleep(self.delay)
            await super().send(message)
        finally:
            self.in_send -= 1


async def _serve_slowly(source: AsyncIterator[betterproto2.Message],
                        client: SlowClient) -> SlowClient:
    response = SseResponse(source, error_grace_s=0.01, keepalive_s=0.1, request_id="q")
    await asyncio.wait_for(response(SCOPE, client.receive, client.send), 10)
    return client


async def test_no_keepalive_while_a_frame_waits_on_a_slow_client() -> None:
    async def source() -> AsyncIterator[betterproto2.Message]:
        yield EVENT

    # The frame's send waits 0.35 s: three keep-alive periods, none of them idle.
    client = await _serve_slowly(source(), SlowClient(b"id:", 0.35))
    assert client.kinds() == ["start 200", "frame", "end"]
    assert client.most_in_send == 1


async def test_a_frame_waits_for_a_keepalive_in_flight() -> None:
    async def source() -> AsyncIterator[betterproto2.Message]:
        await asyncio.sleep(0.15)  # idle: a keep-alive goes out at 0.1 s and waits 0.2 s
        yield EVENT

    client = await _serve_slowly(source(), SlowClient(b": keepalive", 0.2))
    kinds = client.kinds()
    assert kinds[:3] == ["start 200", "keepalive", "frame"] and kinds[-1] == "end", kinds
    assert client.most_in_send == 1
