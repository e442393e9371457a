"""The gRPC listener's corked transport, over real loopback sockets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from grpclib.client import Channel
from grpclib.exceptions import GRPCError
from palyra_gen.palyra import v1 as pb

from palyra.testing.spawn import DaemonProcess, clean_env
from palyra.transport.grpc import CorkedChannel
from palyra.transport.grpc._cork import FLUSH_AT, CorkedTransport

TOKEN = "cork-test-token"


class Pair:
    """A connected loopback pair: the corked side writes, the peer reads."""

    def __init__(self) -> None:
        self.sends: list[bytes] = []
        self.cork: CorkedTransport
        self.reader: asyncio.StreamReader

    async def open(self) -> None:
        accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
            asyncio.get_running_loop().create_future())

        async def on_client(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            accepted.set_result((r, w))

        self.server = await asyncio.start_server(on_client, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        self.writer = writer
        self.reader, self.peer_writer = await accepted
        inner = writer.transport
        assert isinstance(inner, asyncio.Transport)
        real_write = inner.write

        def recording_write(data: bytes | bytearray | memoryview) -> None:
            self.sends.append(bytes(data))  # what reaches the socket transport
            real_write(data)

        inner.write = recording_write  # type: ignore[method-assign]
        self.cork = CorkedTransport(inner, asyncio.get_running_loop())

    async def close(self) -> None:
        self.writer.close()
        self.peer_writer.close()
        self.server.close()
        await self.server.wait_closed()


@pytest.fixture
async def pair() -> AsyncIterator[Pair]:
    p = Pair()
    await p.open()
    yield p
    await p.close()


async def _next_iteration() -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def test_writes_of_one_iteration_leave_as_one_in_order(pair: Pair) -> None:
    pair.cork.write(b"head")
    pair.cork.write(b"")  # nothing to send: not queued
    pair.cork.write(bytearray(b"-body-"))
    pair.cork.writelines([b"trail", memoryview(b"ers")])
    assert pair.sends == [] and pair.cork.pending_bytes() == 18
    assert pair.cork.get_write_buffer_size() >= 18
    await _next_iteration()
    assert pair.sends == [b"head-body-trailers"]
    assert pair.cork.pending_bytes() == 0
    assert await pair.reader.readexactly(18) == b"head-body-trailers"


async def test_later_iterations_send_again_and_the_stream_stays_whole(pair: Pair) -> None:
    expected = b""
    for i in range(50):
        chunk = f"<{i}>".encode()
        pair.cork.write(chunk)
        expected += chunk
        if i % 7 == 0:
            await _next_iteration()
    await _next_iteration()
    assert 1 < len(pair.sends) <= 9  # one send per iteration that wrote, not 50
    assert b"".join(pair.sends) == expected
    assert await pair.reader.readexactly(len(expected)) == expected


async def test_a_write_past_the_cap_goes_to_the_socket_transport_at_once(pair: Pair) -> None:
    """The cork never holds more than FLUSH_AT bytes, so the real transport's
    high-water mark (and with it grpclib's backpressure) sees big writes at once."""
    pair.cork.write(b"a" * 100)
    big = b"b" * FLUSH_AT
    pair.cork.write(big)
    assert pair.sends == [b"a" * 100 + big]  # synchronously, in order
    assert pair.cork.pending_bytes() == 0
    pair.cork.write(b"tail")
    await _next_iteration()
    assert pair.sends[-1] == b"tail" and len(pair.sends) == 2
    data = await pair.reader.readexactly(100 + FLUSH_AT + 4)
    assert data == b"a" * 100 + big + b"tail"


async def test_close_sends_what_is_queued_before_the_end_of_stream(pair: Pair) -> None:
    pair.cork.write(b"last frames")
    pair.cork.close()
    assert pair.cork.is_closing()
    assert await pair.reader.read() == b"last frames"  # then EOF


async def test_abort_drops_what_is_queued(pair: Pair) -> None:
    pair.cork.write(b"never sent")
    pair.cork.abort()
    await _next_iteration()
    assert pair.sends == []
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
        await pair.reader.readexactly(1)


async def test_extra_info_and_reading_pass_through(pair: Pair) -> None:
    assert pair.cork.get_extra_info("socket") is not None
    assert pair.cork.get_extra_info("peername")[0] == "127.0.0.1"
    assert pair.cork.is_reading()
    pair.cork.pause_reading()
    assert not pair.cork.is_reading()
    pair.cork.resume_reading()
    assert pair.cork.is_reading()


@pytest.mark.slow
@pytest.mark.parametrize("channel_class", [Channel, CorkedChannel])
async def test_a_daemon_behind_the_cork_serves_unary_and_streamed_calls(
        tmp_path: Path, channel_class: type[Channel]) -> None:
    """Many concurrent calls on one HTTP/2 connection (their frames share sends, on the
    client's side too with CorkedChannel): every answer is whole and goes to its own call;
    a bad token still fails."""
    env = clean_env(PALYRA_ADMIN_TOKEN=TOKEN, PALYRA_LEARNING_ENABLED="false")
    with DaemonProcess(tmp_path / "data", env=env) as daemon:
        channel = channel_class("127.0.0.1", daemon.grpc_port)
        headers = {"authorization": f"Bearer {TOKEN}", "x-palyra-principal": "user:cork",
                   "x-palyra-device-id": "01J00000000000000000000000"}
        gateway = pb.GatewayServiceStub(channel, metadata=headers)
        try:
            async def turn(i: int) -> tuple[str, str, str]:
                events: list[pb.TapeEvent] = []
                async for response in gateway.run_stream([pb.RunStreamRequest(
                        v=1, session_key=f"cork-{i}", input=pb.MessageInput(text=f"hi {i}"),
                        batch=True)]):
                    events += response.events
                run_id = events[0].run_id
                got = await gateway.get_run(pb.GetRunRequest(run_id=run_id))
                assert [e.tape_seq for e in events] == list(range(len(events)))
                assert {e.run_id for e in events} == {run_id}
                return run_id, got.run.run_id if got.run else "", (
                    got.run.state.name if got.run else "")

            results = await asyncio.gather(*(turn(i) for i in range(12)))
            assert len({r[0] for r in results}) == 12
            assert all(run_id == got and state == "DONE" for run_id, got, state in results)
            bad = pb.GatewayServiceStub(channel, metadata={**headers,
                                                           "authorization": "Bearer nope"})
            with pytest.raises(GRPCError):
                await bad.get_run(pb.GetRunRequest(run_id=results[0][0]))
        finally:
            channel.close()
