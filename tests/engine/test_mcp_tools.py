"""MCP tool servers written with the official SDK, run as real subprocesses, driven
through the whole flow: listing, Cedar and approvals, cancellation, timeouts, a
crash and its restart, schema drift, oversized output, streamable HTTP."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_harness import ADMIN, USER, Harness, next_approval, run_to_end
from palyra_gen.palyra import v1 as pb

from palyra.tools.mcp import McpServerConfig
from palyra.tools.mcp.convert import schema_digest

SERVER = Path(__file__).resolve().parents[1] / "tools" / "mcp" / "files_server.py"
READ_ONLY = ("read_only",)


def stdio(state: Path, **changes: Any) -> McpServerConfig:
    base: dict[str, Any] = {
        "name": "files", "command": sys.executable, "args": (str(SERVER), str(state)),
        "tool_capabilities": {"read": READ_ONLY, "add": READ_ONLY, "slow": READ_ONLY,
                              "crash": READ_ONLY, "big": READ_ONLY, "image": READ_ONLY,
                              "photo": READ_ONLY,
                              "redefine": READ_ONLY, "env": READ_ONLY,
                              "garbage": READ_ONLY, "freeze": READ_ONLY, "flood": READ_ONLY},
        "restart_initial_s": 0.05, "ping_interval_s": 0.5}
    return McpServerConfig(**{**base, **changes})


@pytest.fixture
def state(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    (path / "a.txt").write_text("alpha")
    return path


@pytest.fixture
async def mcp(tmp_path: Path, state: Path) -> AsyncIterator[Harness]:
    h = Harness(tmp_path / "data", mcp=(stdio(state),))
    await h.start()
    yield h
    if h._stack is not None:
        await h.stop()


def _calls(state: Path) -> list[str]:
    path = state / "calls"
    return path.read_text().splitlines() if path.exists() else []


def _results(h: Harness, run_id: str) -> list[pb.ToolResult]:
    return [m for m in h.members(run_id) if isinstance(m, pb.ToolResult)]


async def _until(predicate: Any, timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            if predicate():
                return
            await asyncio.sleep(0.02)


async def test_tools_are_listed_with_the_servers_schemas(mcp: Harness) -> None:
    assert mcp.registry is not None
    names = {t.name for t in mcp.registry if t.name.startswith("mcp.")}
    assert {"mcp.files.read", "mcp.files.write", "mcp.files.add", "mcp.files.slow"} <= names
    read = mcp.registry.get("mcp.files.read")
    assert read is not None and read.json_schema()["required"] == ["path"]
    assert read.executor == "mcp"


async def test_a_read_only_call_runs_and_is_attested(mcp: Harness, state: Path) -> None:
    assert mcp.app is not None
    run = await run_to_end(mcp.app, '/call mcp.files.read {"path": "a.txt"}')
    assert json.loads(run.final_text) == {"result": "alpha"}
    [result] = _results(mcp, run.run_id)
    assert result.success and result.attestation is not None
    facts = result.attestation.facts
    assert result.attestation.executor == "mcp"
    assert facts["mcp.server"] == "files" and facts["mcp.server_version"] == "1.2.3"
    read = mcp.registry.get("mcp.files.read")  # type: ignore[union-attr]
    assert read is not None
    assert facts["mcp.schema_sha256"] == schema_digest("read", read.description,
                                                       read.json_schema())
    assert _calls(state) == ["read a.txt"]


async def test_a_tool_of_unknown_capabilities_needs_an_approval(mcp: Harness,
                                                               state: Path) -> None:
    assert mcp.app is not None
    created = await mcp.app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text='/call mcp.files.write {"path": "b.txt", "text": "hi"}'),
        complete=True))
    approval = await next_approval(mcp.app, created.run.run_id)
    assert approval.tool_name == "mcp.files.write"
    assert _calls(state) == []  # the server has not been called
    await mcp.app.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=approval.approval_id, decision=pb.ApprovalDecision.APPROVE,
        scope=pb.ApprovalScope.ONCE))
    run = (await mcp.app.complete_run(USER, pb.CompleteRunRequest(
        run_id=created.run.run_id, wait=True))).run
    assert json.loads(run.final_text) == {"result": "wrote 2 characters"}
    assert (state / "b.txt").read_text() == "hi"


async def test_arguments_are_checked_against_the_servers_schema(mcp: Harness,
                                                                state: Path) -> None:
    assert mcp.app is not None
    run = await run_to_end(mcp.app, '/call mcp.files.read {"path": 5}')
    error = json.loads(run.final_text)["error"]
    assert "invalid arguments for mcp.files.read" in error and "is not of type" in error
    assert _calls(state) == []


async def test_cancelling_the_run_cancels_the_call_on_the_server(mcp: Harness,
                                                                 state: Path) -> None:
    assert mcp.app is not None
    created = await mcp.app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text='/call mcp.files.slow {"seconds": 60}'), complete=True))
    await _until(lambda: "slow started" in _calls(state))
    await mcp.app.abort_run(USER, pb.AbortRunRequest(run_id=created.run.run_id))
    run = (await mcp.app.get_run(USER, pb.GetRunRequest(run_id=created.run.run_id))).run
    assert run.state == pb.RunState.CANCELLED
    # notifications/cancelled reached the server, which stopped the handler.
    await _until(lambda: (state / "cancelled").exists())


async def test_the_tool_timeout_cancels_the_call(tmp_path: Path, state: Path) -> None:
    h = Harness(tmp_path / "data", mcp=(stdio(state, timeout_s=0.5),))
    app = await h.start()
    try:
        run = await run_to_end(app, '/call mcp.files.slow {"seconds": 60}')
        [result] = _results(h, run.run_id)
        assert result.timed_out and not result.success
        await _until(lambda: (state / "cancelled").exists())
    finally:
        await h.stop()


async def test_a_crash_mid_call_fails_the_call_and_the_server_comes_back(
        mcp: Harness, state: Path) -> None:
    assert mcp.app is not None and mcp.hub is not None
    server = mcp.hub.servers["files"]
    run = await run_to_end(mcp.app, "/call mcp.files.crash")
    [result] = _results(mcp, run.run_id)
    assert not result.success and "files" in result.error
    assert run.state == pb.RunState.DONE  # the model heard of it; nothing else broke
    await _until(lambda: server.connects >= 2)  # restarted by the supervisor
    again = await run_to_end(mcp.app, '/call mcp.files.read {"path": "a.txt"}')
    assert json.loads(again.final_text) == {"result": "alpha"}


async def test_schema_drift_updates_the_registry_and_the_attestation(mcp: Harness) -> None:
    assert mcp.app is not None and mcp.registry is not None
    first = await run_to_end(mcp.app, '/call mcp.files.add {"a": 1, "b": 2}')
    assert json.loads(first.final_text) == {"result": 3.0}
    await run_to_end(mcp.app, "/call mcp.files.redefine")
    registry = mcp.registry
    await _until(lambda: "c" in (registry.get("mcp.files.add").json_schema()  # type: ignore[union-attr]
                                 ["properties"]))
    assert registry.get("mcp.files.big") is None  # the server dropped it
    second = await run_to_end(mcp.app, '/call mcp.files.add {"a": 1, "b": 2, "c": 3}')
    assert json.loads(second.final_text) == {"result": 6.0}
    digests = [_results(mcp, r.run_id)[0].attestation.facts["mcp.schema_sha256"]  # type: ignore[union-attr]
               for r in (first, second)]
    assert digests[0] != digests[1]
    gone = await run_to_end(mcp.app, '/call mcp.files.big {"n": 1}')
    assert "denied" in json.loads(gone.final_text)["error"]


async def test_oversized_output_is_a_failed_result(tmp_path: Path, state: Path) -> None:
    h = Harness(tmp_path / "data", mcp=(stdio(state, max_output_bytes=1000),))
    app = await h.start()
    try:
        run = await run_to_end(app, '/call mcp.files.big {"n": 100000}')
        [result] = _results(h, run.run_id)
        assert not result.success and "over the 1000-byte limit" in result.error
    finally:
        await h.stop()


async def test_images_are_described_not_inlined(mcp: Harness) -> None:
    assert mcp.app is not None
    run = await run_to_end(mcp.app, "/call mcp.files.image")
    blocks = json.loads(run.final_text)["content"]
    assert blocks[0] == {"type": "text", "text": "a picture"}
    assert blocks[1]["type"] == "image" and blocks[1]["mime_type"] == "image/png"
    assert blocks[1]["bytes"] == 12 and len(blocks[1]["sha256"]) == 64
    assert "not_attached" in blocks[1]  # not an image the store takes: described only


async def test_an_image_result_is_an_attachment_the_model_sees(mcp: Harness,
                                                              state: Path) -> None:
    assert mcp.app is not None and mcp.engine is not None and mcp.store is not None
    run = await run_to_end(mcp.app, "/call mcp.files.photo")
    data = (state / "photo.png").read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    [result] = _results(mcp, run.run_id)
    assert [(a.sha256, a.mime_type, a.width, a.height, a.size_bytes)
            for a in result.attachments] == [(digest, "image/png", 3, 2, len(data))]
    assert result.attestation is not None
    assert result.attestation.facts["mcp.images_sha256"] == digest
    # The bytes are in the attachment store, kept by the run's reference...
    assert mcp.engine.attachments.get(digest) == data
    assert [k for k, _v in mcp.store.scan_entities("meta", "attachment_ref:", "", 10)] == [
        f"attachment_ref:{digest}:{run.run_id}"]
    # ...and the model's next turn had them (the scripted model describes what it got).
    assert run.final_text.endswith(f"image: image/png 3x2 sha256:{digest[:12]}")
    blocks = json.loads(run.final_text.split("\nimage: ")[0])["content"]
    assert blocks[1]["attached"] is True and blocks[1]["mime_type"] == "image/png"


async def test_the_server_gets_only_its_configured_environment(
        tmp_path: Path, state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PALYRA_SECRET_FOR_TEST", "leaked")
    h = Harness(tmp_path / "data", mcp=(stdio(state, env={"GREETING": "hello"}),))
    app = await h.start()
    try:
        secret = await run_to_end(app, '/call mcp.files.env {"name": "PALYRA_SECRET_FOR_TEST"}')
        greeting = await run_to_end(app, '/call mcp.files.env {"name": "GREETING"}')
        assert json.loads(secret.final_text) == {"result": "<unset>"}
        assert json.loads(greeting.final_text) == {"result": "hello"}
    finally:
        await h.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve_http(state: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, str(SERVER), str(state), "http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("the HTTP MCP server did not start") from None
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the HTTP MCP server did not listen")


@pytest.fixture
def http_port() -> int:
    return _free_port()


@pytest.fixture
def http_server(state: Path, http_port: int) -> Iterator[str]:
    proc = _serve_http(state, http_port)
    try:
        yield f"http://127.0.0.1:{http_port}/mcp"
    finally:
        proc.kill()
        proc.wait()


async def test_a_streamable_http_server(tmp_path: Path, state: Path, http_server: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FILES_TOKEN", "Bearer t0ken")
    config = McpServerConfig(name="remote", url=http_server, header="Authorization",
                             header_env="FILES_TOKEN", capabilities=READ_ONLY)
    h = Harness(tmp_path / "data", mcp=(config,))
    app = await h.start()
    try:
        run = await run_to_end(app, '/call mcp.remote.read {"path": "a.txt"}')
        assert json.loads(run.final_text) == {"result": "alpha"}
        [result] = _results(h, run.run_id)
        assert result.attestation is not None
        assert result.attestation.facts["mcp.server"] == "remote"
    finally:
        await h.stop()


async def test_malformed_json_rpc_is_logged_and_the_call_still_answers(
        tmp_path: Path, state: Path, caplog: pytest.LogCaptureFixture) -> None:
    proxy = SERVER.with_name("garbling_proxy.py")
    h = Harness(tmp_path / "data", mcp=(stdio(state, args=(str(proxy), str(state))),))
    app = await h.start()
    try:
        run = await run_to_end(app, "/call mcp.files.garbage")
        assert json.loads(run.final_text) == {"result": "after garbage"}
        assert any("malformed message" in r.getMessage() for r in caplog.records)
        again = await run_to_end(app, '/call mcp.files.read {"path": "a.txt"}')
        assert json.loads(again.final_text) == {"result": "alpha"}
    finally:
        await h.stop()


async def test_a_line_without_end_is_cut_off_and_the_server_replaced(
        tmp_path: Path, state: Path, caplog: pytest.LogCaptureFixture) -> None:
    # 64 MiB without a newline: the daemon reads at most its 1 MiB bound of it.
    proxy = SERVER.with_name("garbling_proxy.py")
    h = Harness(tmp_path / "data", mcp=(stdio(state, args=(str(proxy), str(state)),
                                              max_message_bytes=1024 * 1024),))
    app = await h.start()
    try:
        assert h.hub is not None
        server = h.hub.servers["files"]
        run = await run_to_end(app, "/call mcp.files.flood")
        [result] = _results(h, run.run_id)
        assert not result.success and "files" in result.error
        assert any("over 1048576 bytes" in r.getMessage() for r in caplog.records)
        await _until(lambda: server.connects >= 2, timeout_s=40)
        again = await run_to_end(app, '/call mcp.files.read {"path": "a.txt"}')
        assert json.loads(again.final_text) == {"result": "alpha"}
    finally:
        await h.stop()


async def test_a_hung_server_times_out_and_is_replaced(tmp_path: Path, state: Path) -> None:
    h = Harness(tmp_path / "data", mcp=(stdio(state, timeout_s=0.5, connect_timeout_s=5.0,
                                              ping_interval_s=0.2),))
    app = await h.start()
    try:
        assert h.hub is not None
        server = h.hub.servers["files"]
        run = await run_to_end(app, '/call mcp.files.freeze {"seconds": 30}')
        [result] = _results(h, run.run_id)
        assert result.timed_out
        # The ping timed out: the old server was stopped and a new one started.
        await _until(lambda: server.connects >= 2, timeout_s=40)
        again = await run_to_end(app, '/call mcp.files.read {"path": "a.txt"}')
        assert json.loads(again.final_text) == {"result": "alpha"}
    finally:
        await h.stop()


async def test_an_http_server_that_dies_is_reconnected(tmp_path: Path, state: Path,
                                                      http_port: int) -> None:
    proc = _serve_http(state, http_port)
    config = McpServerConfig(name="remote", url=f"http://127.0.0.1:{http_port}/mcp",
                             capabilities=READ_ONLY, ping_interval_s=0.2, connect_timeout_s=2.0,
                             restart_initial_s=0.1, restart_max_s=0.5)
    h = Harness(tmp_path / "data", mcp=(config,))
    app = await h.start()
    try:
        assert h.hub is not None
        server = h.hub.servers["remote"]
        proc.kill()
        proc.wait()
        await _until(lambda: not server.connected)  # the ping noticed
        down = await run_to_end(app, '/call mcp.remote.read {"path": "a.txt"}')
        assert "not connected" in json.loads(down.final_text)["error"]
        proc = await asyncio.to_thread(_serve_http, state, http_port)
        await _until(lambda: server.connects >= 2, timeout_s=30)
        up = await run_to_end(app, '/call mcp.remote.read {"path": "a.txt"}')
        assert json.loads(up.final_text) == {"result": "alpha"}
    finally:
        await h.stop()
        proc.kill()
        proc.wait()
