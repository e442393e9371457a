"""The gRPC port while the daemon starts: prompt, standard answers, never the backlog.

Start-up is held for real, as in ``test_startup_readiness``: an MCP server that
never answers keeps ``palyra serve`` waiting its ``connect_timeout_s``. The
clients are gRPC's own C-core client (``grpcio``) and grpclib: the standard
``grpc.health.v1.Health`` says NOT_SERVING then SERVING, ``GetHealth`` names
the phase, any other RPC is UNAVAILABLE naming it, and once start-up ends the
real gateway answers on the same port.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]  # grpcio ships no types
import pytest
from grpclib.client import Channel
from grpclib.const import Cardinality, Status
from grpclib.exceptions import GRPCError
from grpclib.health.v1.health_pb2 import HealthCheckRequest, HealthCheckResponse
from palyra_gen.palyra import v1

from palyra.daemon.listen import bind_listener, bound_port
from palyra.daemon.starting_grpc import StartupGrpcResponder
from palyra.testing.spawn import clean_env
from palyra.transport.grpc import ClientCodec

pytestmark = pytest.mark.slow

HOLD_S = 8.0
BIND_WITHIN_S = 60.0  # the interpreter's start and imports, on a loaded machine
PROMPT_S = 2.0  # an answer during start-up comes at least this fast (the backlog: never)
TOKEN = "admin-token-of-the-grpc-startup-test"
USER = (("authorization", f"Bearer {TOKEN}"), ("x-palyra-principal", "user:ops"),
        ("x-palyra-device-id", "01J00000000000000000000000"))
CHECK = "/grpc.health.v1.Health/Check"
WATCH = "/grpc.health.v1.Health/Watch"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _check(channel: grpc.Channel, service: str = "", timeout: float = PROMPT_S) -> int:
    call = channel.unary_unary(CHECK, request_serializer=HealthCheckRequest.SerializeToString,
                               response_deserializer=HealthCheckResponse.FromString)
    return int(call(HealthCheckRequest(service=service), timeout=timeout).status)


def _palyra(channel: grpc.Channel, path: str, request: Any, reply: type[Any],
            metadata: tuple[tuple[str, str], ...] = ()) -> Any:
    call = channel.unary_unary(path, request_serializer=bytes, response_deserializer=reply.parse)
    return call(request, timeout=PROMPT_S, metadata=metadata)


def _get_health(channel: grpc.Channel) -> v1.GetHealthResponse:
    answer: v1.GetHealthResponse = _palyra(channel, "/palyra.v1.GatewayService/GetHealth",
                                           v1.GetHealthRequest(), v1.GetHealthResponse)
    return answer


def test_grpc_answers_not_serving_then_serving_across_a_held_start_up(tmp_path: Path) -> None:
    config = tmp_path / "palyra.toml"
    config.write_text(f'[[tools.mcp]]\nname = "mute"\ncommand = "sh"\n'
                      f'args = ["-c", "cat > /dev/null"]\nconnect_timeout_s = {HOLD_S}\n')
    port = _free_port()
    log = (tmp_path / "daemon.log").open("wb")
    daemon = subprocess.Popen(
        [sys.executable, "-m", "palyra.cli.main", "serve", "--data-dir", str(tmp_path / "data"),
         "--grpc-port", str(port), "--http-port", "0", "--config", str(config)],
        stdout=log, stderr=subprocess.STDOUT, env=clean_env(PALYRA_ADMIN_TOKEN=TOKEN))
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            deadline = time.monotonic() + BIND_WITHIN_S
            while True:
                try:
                    status = _check(channel)
                    break
                except grpc.RpcError as exc:  # not bound yet: connection refused
                    assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
                    assert time.monotonic() < deadline, exc
                    time.sleep(0.05)
            assert status == HealthCheckResponse.NOT_SERVING
            while "connecting MCP servers" not in (health := _get_health(channel)).checks[0].detail:
                assert not health.ready
            assert not health.ready and health.service == "palyra"
            began = time.monotonic()
            assert _check(channel) == HealthCheckResponse.NOT_SERVING
            assert _check(channel, "palyra.v1.GatewayService") == HealthCheckResponse.NOT_SERVING
            with pytest.raises(grpc.RpcError) as unknown:
                _check(channel, "no.such.Service")
            assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
            with pytest.raises(grpc.RpcError) as refused:
                _palyra(channel, "/palyra.v1.GatewayService/CreateRun",
                        v1.CreateRunRequest(), v1.CreateRunResponse,
                        metadata=USER)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "the daemon is starting: connecting MCP servers" in refused.value.details()
            trailers = dict(refused.value.trailing_metadata())
            assert trailers["x-palyra-error-code"] == "UNAVAILABLE"
            assert trailers["x-palyra-retryable"] == "true"
            assert time.monotonic() - began < 5 * PROMPT_S  # prompt, not the backlog
            watch = channel.unary_stream(
                WATCH, request_serializer=HealthCheckRequest.SerializeToString,
                response_deserializer=HealthCheckResponse.FromString)(
                    HealthCheckRequest(service=""), timeout=HOLD_S + 60)
            assert next(watch).status == HealthCheckResponse.NOT_SERVING
            held_from = time.monotonic()
            with pytest.raises(grpc.RpcError) as ended:  # start-up finished: watch again
                next(watch)
            assert ended.value.code() == grpc.StatusCode.UNAVAILABLE, ended.value
            assert time.monotonic() - held_from > 0.5  # start-up really was held
            # The same channel reconnects (GOAWAY) and finds the real gateway.
            deadline = time.monotonic() + 30
            while True:
                try:
                    status = _check(channel, timeout=5.0)
                except grpc.RpcError as exc:
                    # A call caught in the hand-over itself (the responder's REFUSED_STREAM
                    # or its GOAWAY) ends UNAVAILABLE, which a client retries, as here.
                    assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc
                    status = HealthCheckResponse.NOT_SERVING
                if status == HealthCheckResponse.SERVING:
                    break
                assert status == HealthCheckResponse.NOT_SERVING
                assert time.monotonic() < deadline
                time.sleep(0.05)
            served = _get_health(channel)
            assert served.ready and served.journal_head  # the real gateway's answer
            again = channel.unary_stream(
                WATCH, request_serializer=HealthCheckRequest.SerializeToString,
                response_deserializer=HealthCheckResponse.FromString)(
                    HealthCheckRequest(service=""), timeout=10)
            assert next(again).status == HealthCheckResponse.SERVING
            again.cancel()
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(30)
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
            log.close()
    assert daemon.returncode == 0, (tmp_path / "daemon.log").read_text()[-2000:]


async def test_a_streaming_call_is_refused_without_half_closing_and_the_socket_is_handed_over(
) -> None:
    listener = bind_listener("127.0.0.1", 0)
    port = bound_port(listener)
    responder = StartupGrpcResponder(listener, "palyra", "1.2.3", max_message_bytes=1 << 20)
    responder.set_phase("recovering runs")
    responder.start()
    channel = Channel("127.0.0.1", port, codec=ClientCodec())
    try:
        began = time.monotonic()
        with pytest.raises(GRPCError) as refused:
            async with channel.request("/palyra.v1.GatewayService/RunStream",
                                       Cardinality.STREAM_STREAM, v1.RunStreamRequest,
                                       v1.RunStreamResponse, metadata=dict(USER)) as stream:
                await stream.send_message(v1.RunStreamRequest())  # and never half-closes
                await stream.recv_message()
        assert refused.value.status is Status.UNAVAILABLE
        assert "the daemon is starting: recovering runs" in (refused.value.message or "")
        assert time.monotonic() - began < PROMPT_S
    finally:
        channel.close()
        await asyncio.to_thread(responder.stop)
    # Stopped: the listener is still open and a new connection waits for its next owner.
    waiting = socket.create_connection(("127.0.0.1", port), timeout=1.0)
    waiting.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    waiting.settimeout(0.3)
    with pytest.raises(TimeoutError):
        waiting.recv(1)
    waiting.close()
    listener.close()
