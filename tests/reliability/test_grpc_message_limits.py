"""Oversized gRPC messages are refused from their length prefix (issue 12, item 9).

Four clients each send a 64 MB AppendEvent at once; the daemon answers each with
PAYLOAD_TOO_LARGE without reading the bodies, and its peak RSS stays far below
what buffering them would take. A message whose prefix claims 1 GiB and whose
body stops short gets the same clean error, not INTERNAL.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpclib.client import Channel
from grpclib.const import Cardinality, Status
from grpclib.exceptions import GRPCError
from palyra_gen.palyra import v1

from palyra.testing.spawn import DaemonProcess, clean_env

pytestmark = pytest.mark.slow
TOKEN = "limits-token"
HEADERS = {"authorization": f"Bearer {TOKEN}", "x-palyra-principal": "user:big",
           "x-palyra-device-id": "01J00000000000000000000000"}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    env = clean_env(PALYRA_ADMIN_TOKEN=TOKEN)
    with DaemonProcess(tmp_path_factory.mktemp("limits") / "data", env=env) as proc:
        yield proc


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


async def _oversized(port: int, size: int) -> GRPCError:
    async with Channel("127.0.0.1", port) as channel:
        stub = v1.GatewayServiceStub(channel, metadata=HEADERS)
        request = v1.AppendEventRequest(v=1, session_id="01J00000000000000000000000",
                                        run_id="01J00000000000000000000000", kind="k",
                                        actor="user:big", timestamp_unix_ms=1,
                                        payload_json="x" * size)
        with pytest.raises(GRPCError) as err:
            await asyncio.wait_for(stub.append_event(request), 60)
        return err.value


async def test_oversized_messages_are_refused_from_the_prefix(daemon: DaemonProcess) -> None:
    before = _peak_rss_mb(daemon.pid)
    errors = await asyncio.gather(*(_oversized(daemon.grpc_port, 64 << 20) for _ in range(4)))
    for error in errors:
        assert error.status is Status.RESOURCE_EXHAUSTED, (error.status, error.message)
        assert "exceeds the" in (error.message or "")
    peak = _peak_rss_mb(daemon.pid)
    # Buffering the four bodies would take 256 MB on top of the daemon.
    assert peak - before < 64, (before, peak)


async def test_a_prefix_claiming_a_gigabyte_gets_a_clean_error(daemon: DaemonProcess) -> None:
    channel = Channel("127.0.0.1", daemon.grpc_port)
    try:
        async with channel.request("/palyra.v1.GatewayService/AppendEvent",
                                   Cardinality.STREAM_UNARY, v1.AppendEventRequest,
                                   v1.AppendEventResponse, metadata=HEADERS) as stream:
            await stream.send_request()
            prefix = b"\x00" + struct.pack(">I", 1 << 30)
            # Raw bytes: a prefix announcing 1 GiB, a few bytes, then the end (the client
            # side says STREAM_UNARY only so grpclib lets it end after raw bytes).
            await stream._stream.send_data(prefix + b"partial")
            await stream.end()
            with pytest.raises(GRPCError) as err:
                await stream.recv_message()
    finally:
        channel.close()
    assert err.value.status is Status.RESOURCE_EXHAUSTED
    assert err.value.status is not Status.INTERNAL
