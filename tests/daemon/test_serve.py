"""``palyra serve`` as a user runs it: ephemeral ports, token, health, caps, SIGTERM."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest
from grpclib.client import Channel
from grpclib.const import Cardinality, Status
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import GRPCError
from palyra_gen.palyra import v1

from palyra.journal import verify_store
from palyra.testing.spawn import DaemonProcess

pytestmark = pytest.mark.slow

HEADERS = {"x-palyra-principal": "user:a", "x-palyra-device-id": "01J00000000000000000000000"}


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}


async def test_serve_health_auth_caps_and_sigterm(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    daemon = DaemonProcess(data_dir, env=_env()).start()
    try:
        token = (data_dir / "admin.token").read_text().strip()
        assert stat.S_IMODE(os.stat(data_dir / "admin.token").st_mode) == 0o600
        assert stat.S_IMODE(os.stat(data_dir / "daemon.json").st_mode) == 0o600
        for directory in (data_dir, data_dir / "workspace"):
            assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700, directory
        assert daemon.log().count(token) == 1  # printed once
        assert f"HTTP on 127.0.0.1:{daemon.http_port}" in daemon.log()
        auth = {**HEADERS, "authorization": f"Bearer {token}"}

        async with Channel("127.0.0.1", daemon.grpc_port) as channel:
            health = await v1.GatewayServiceStub(channel).get_health()
            assert health.service == "palyra"
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{daemon.http_port}") as client:
            assert (await client.get("/healthz")).json()["service"] == "palyra"
            assert (await client.get("/v1/journal/head")).status_code == 401
            before = (await client.get("/v1/journal/head", headers=auth)).json()
            too_big = await client.post("/v1/runs", headers=auth, content=b" " * (1024 * 1024 + 1))
            assert too_big.status_code == 413
            assert too_big.json()["code"] == "PAYLOAD_TOO_LARGE"
            malformed = await client.post("/v1/runs", headers=auth, content=b'{"input": 3}')
            assert malformed.status_code == 400
            assert (await client.get("/v1/journal/head", headers=auth)).json() == before
            run = await client.post("/v1/runs", headers=auth, json={
                "input": {"text": "hello"}, "complete": True, "wait": True})
            assert run.json()["run"]["state"] == "RUN_STATE_DONE"
    finally:
        code = daemon.stop()
    assert code == 0
    assert not (data_dir / "daemon.json").exists()
    assert "daemon_stopped" in daemon.log()
    # A clean stop signs the head, so an offline verify vouches for every event.
    report = verify_store(data_dir)
    assert report.ok and report.checkpoints >= 1 and report.head_position == report.events

    again = DaemonProcess(data_dir, env=_env()).start()
    try:
        assert again.log().count(token) == 1  # not printed a second time
    finally:
        assert again.stop() == 0


def test_env_admin_token_is_used_and_not_stored(tmp_path: Path) -> None:
    env = {**_env(), "PALYRA_ADMIN_TOKEN": "chosen-token"}
    with DaemonProcess(tmp_path / "d", env=env) as daemon:
        response = httpx.get(f"http://127.0.0.1:{daemon.http_port}/v1/journal/head",
                             headers={**HEADERS, "authorization": "Bearer chosen-token"})
        assert response.status_code == 200
    assert not (tmp_path / "d" / "admin.token").exists()


def test_bad_config_exits_with_a_message(tmp_path: Path) -> None:
    env = {**_env(), "PALYRA_LOG_FORMAT": "xml"}
    with pytest.raises(RuntimeError, match="CONFIG_INVALID"):
        DaemonProcess(tmp_path / "d", env=env, extra_args=()).start(timeout=20)


class _RawCodec(ProtoCodec):
    """Sends the bytes it is given: lets a test put malformed protobuf on the wire."""

    def encode(self, message: Any, message_type: Any) -> bytes:
        return bytes(message)

    def decode(self, data: bytes, message_type: Any) -> Any:
        return data


@pytest.mark.parametrize(
    ("method", "raw"),
    [
        ("CreateRun", b"\x12\x10abc"),  # session_id's length runs past the end
        ("CreateRun", b"\x0a\x05ab"),  # v (uint32) sent length-delimited
        ("AppendEvent", b"\x2a\x02\xff\xfe"),  # kind is not UTF-8
        ("AppendEvent", bytes.fromhex("ffffffff0f01")),  # invalid tag
    ],
)
async def test_malformed_protobuf_is_refused_and_the_journal_untouched(
    tmp_path: Path, method: str, raw: bytes
) -> None:
    env = {**_env(), "PALYRA_ADMIN_TOKEN": "t"}
    with DaemonProcess(tmp_path / "d", env=env) as daemon:
        auth = {**HEADERS, "authorization": "Bearer t"}
        head_url = f"http://127.0.0.1:{daemon.http_port}/v1/journal/head"
        async with httpx.AsyncClient() as http:
            before = (await http.get(head_url, headers=auth)).json()
        channel = Channel("127.0.0.1", daemon.grpc_port, codec=_RawCodec())
        try:
            async with channel.request(
                f"/palyra.v1.GatewayService/{method}", Cardinality.UNARY_UNARY, bytes, bytes,
                metadata=list(auth.items()),
            ) as stream:
                await stream.send_message(raw, end=True)
                with pytest.raises(GRPCError) as info:
                    await stream.recv_message()
        finally:
            channel.close()
        assert info.value.status == Status.INVALID_ARGUMENT
        assert "not a valid" in (info.value.message or "")
        async with httpx.AsyncClient() as http:
            assert (await http.get(head_url, headers=auth)).json() == before
