"""Malformed input to every gRPC method of the spec gets a stable error, never INTERNAL.

Property-based, from the spec (``palyra_gen.services.RPCS``): for each method,
hypothesis sends arbitrary bytes, and valid messages with random bytes appended,
as the request body over a raw gRPC stream to a live daemon. Every answer is
either OK or an error carrying a stable ``x-palyra-error-code`` (no INTERNAL,
no UNKNOWN), and the daemon keeps serving.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from grpclib.client import Channel
from grpclib.const import Cardinality, Status
from grpclib.exceptions import GRPCError, StreamTerminatedError
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from palyra_gen.palyra import v1
from palyra_gen.services import RPCS

from palyra.testing.spawn import DaemonProcess, clean_env

pytestmark = pytest.mark.slow
TOKEN = "grpc-fuzz-token"
HEADERS = {"authorization": f"Bearer {TOKEN}", "x-palyra-principal": "user:fuzz",
           "x-palyra-device-id": "01J00000000000000000000000"}
BAD = {Status.INTERNAL, Status.UNKNOWN}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    env = clean_env(PALYRA_ADMIN_TOKEN=TOKEN)
    with DaemonProcess(tmp_path_factory.mktemp("grpcfuzz") / "data", env=env) as proc:
        yield proc


async def _send_raw(port: int, rpc: Any, body: bytes) -> tuple[Status, str]:
    """One call with ``body`` as its only request message; (status, error code trailer)."""
    request_cls = getattr(v1, rpc.request_type.rsplit(".", 1)[-1])
    response_cls = getattr(v1, rpc.response_type.rsplit(".", 1)[-1])
    channel = Channel("127.0.0.1", port)
    try:
        async with asyncio.timeout(10):
            async with channel.request(f"/{rpc.service}/{rpc.method}", Cardinality.STREAM_STREAM,
                                       request_cls, response_cls, metadata=HEADERS) as stream:
                await stream.send_request()
                await stream._stream.send_data(b"\x00" + struct.pack(">I", len(body)) + body)
                await stream.end()
                try:
                    async for _ in stream:
                        pass
                except GRPCError as exc:
                    trailers = stream.trailing_metadata or {}
                    return exc.status, str(trailers.get("x-palyra-error-code", ""))
        return Status.OK, ""
    finally:
        channel.close()


_valid_prefix = st.sampled_from([b"", b"\x08\x01", b"\x12\x1a01J00000000000000000000000",
                                 b"\x0a\x05hello"])


@pytest.mark.parametrize("rpc", RPCS, ids=lambda r: r.method)
def test_malformed_requests_get_a_stable_code(daemon: DaemonProcess, rpc: Any) -> None:
    @seed(20261124)
    @settings(max_examples=8, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(prefix=_valid_prefix, tail=st.binary(max_size=64))
    def check(prefix: bytes, tail: bytes) -> None:
        try:
            status, code = asyncio.run(_send_raw(daemon.grpc_port, rpc, prefix + tail))
        except StreamTerminatedError:
            return  # the server refused the stream at the protocol level: not a crash
        assert status not in BAD, (rpc.method, prefix + tail, status, code)
        assert status is Status.OK or code, (rpc.method, status)

    check()
    # The daemon still answers.
    status, _ = asyncio.run(_send_raw(daemon.grpc_port, RPCS[0], b""))
    assert status is not Status.INTERNAL
