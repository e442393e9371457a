"""process.run's sandbox tiers, each limit proven from inside the sandbox."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from palyra.adapters import GatePolicy
from palyra.engine import IdentityRec, ToolRequest
from palyra.policy import PolicyConfig, PolicyGate
from palyra.tools import (
    SandboxConfig,
    ToolContext,
    ToolResult,
    ToolsConfig,
    default_registry,
)
from palyra.tools._sandbox import command_line

# Debian's interpreter: an unprivileged sandbox user cannot reach one under /root.
PYTHON = "/usr/bin/python3"


async def _py(sandbox: SandboxConfig, ctx: ToolContext, code: str,
              timeout_s: float = 30.0) -> tuple[ToolResult, dict[str, Any]]:
    registry = default_registry(ToolsConfig(process_exec_enabled=True, sandbox=sandbox))
    result = await registry.execute("process.run", {"argv": [PYTHON, "-c", code]}, ctx,
                                    timeout_s=timeout_s)
    assert result.success, result.error
    return result, msgspec.json.decode(result.output_json)


async def test_tier_b_caps_memory(ctx: ToolContext) -> None:
    code = "b = bytearray(400 * 1024 * 1024); print('allocated')"
    _, loose = await _py(SandboxConfig(tier="a"), ctx, code)
    assert loose["stdout"].strip() == "allocated"  # the same program, unconfined
    result, out = await _py(SandboxConfig(tier="b", memory_bytes=256 * 1024 * 1024), ctx, code)
    assert out["exit_code"] != 0 and "MemoryError" in out["stderr"]
    assert result.facts["sandbox.tier"] == "b"
    assert "memory_bytes=268435456" in result.facts["sandbox.limits"]


async def test_tier_b_caps_cpu_seconds(ctx: ToolContext) -> None:
    _, out = await _py(SandboxConfig(tier="b", cpu_s=1), ctx, "while True: pass")
    assert out["signal"] in ("SIGXCPU", "SIGKILL")


async def test_tier_b_caps_open_files(ctx: ToolContext) -> None:
    code = ("import os\nfds = []\ntry:\n    for _ in range(100): fds.append(os.open('/dev/null', "
            "os.O_RDONLY))\nexcept OSError as e: print('refused', e.errno, len(fds))")
    _, out = await _py(SandboxConfig(tier="b", open_files=32), ctx, code)
    word, errno, opened = out["stdout"].split()
    assert word == "refused" and errno == "24" and int(opened) < 32  # EMFILE


FORK_BOMB = """
import os, time
children = 0
try:
    for _ in range(200):
        pid = os.fork()
        if pid == 0:
            time.sleep(3)
            os._exit(0)
        children += 1
    print("unbounded", children)
except OSError as e:
    print("refused", e.errno, children)
"""


@pytest.fixture
def open_workspace(workspace: Path) -> Path:
    workspace.chmod(0o777)  # the unprivileged sandbox user works in it
    return workspace


async def test_tier_b_stops_a_fork_bomb(open_workspace: Path, ctx: ToolContext) -> None:
    # As root the kernel ignores the process limit: the program runs as Debian's
    # "daemon" account. The limit counts every process of that user, so not "nobody",
    # which the PostgreSQL test servers run as (a live one would eat the budget).
    sandbox = SandboxConfig(tier="b", processes=16, user="daemon")
    result, out = await _py(sandbox, ctx, FORK_BOMB)
    word, errno, children = out["stdout"].split()
    assert word == "refused" and errno == "11" and int(children) < 16  # EAGAIN
    assert result.facts["sandbox.user"] == "daemon"


async def test_tier_c_writes_only_the_workspace(workspace: Path, tmp_path: Path,
                                                ctx: ToolContext) -> None:
    outside = tmp_path / "outside.txt"
    code = (f"open('inside.txt', 'w').write('ok')\n"
            f"open({str(outside)!r}, 'w').write('owned')\n"  # a private /tmp: discarded
            "try:\n    open('/etc/palyra-test', 'w')\nexcept OSError as e: print(e.strerror)")
    result, out = await _py(SandboxConfig(tier="c"), ctx, code)
    assert out["stdout"].strip() == "Read-only file system"
    assert (workspace / "inside.txt").read_text() == "ok"
    assert outside.read_text() == "secret"
    assert result.facts["sandbox.workspace"] == "rw" and result.facts["sandbox.network"] == "none"
    (workspace / "inside.txt").unlink()
    _, ro = await _py(SandboxConfig(tier="c", workspace="ro"), ctx,
                      "try:\n    open('inside.txt', 'w')\nexcept OSError as e: print(e.strerror)")
    assert ro["stdout"].strip() == "Read-only file system"
    assert not (workspace / "inside.txt").exists()


@pytest.fixture
def listener() -> Iterator[tuple[int, list[str]]]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted: list[str] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append("yes")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    server.close()
    thread.join(2)


async def test_tier_c_has_no_network(listener: tuple[int, list[str]], ctx: ToolContext) -> None:
    port, accepted = listener
    code = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), "
            "timeout=2)\n    print('connected')\nexcept OSError as e: print('refused')")
    _, b = await _py(SandboxConfig(tier="b"), ctx, code)
    assert b["stdout"].strip() == "connected" and accepted == ["yes"]  # the control
    _, c = await _py(SandboxConfig(tier="c"), ctx, code)
    assert c["stdout"].strip() == "refused" and accepted == ["yes"]


def test_the_command_lines() -> None:
    ws = Path("/srv/ws")
    assert command_line(SandboxConfig(tier="a"), ["ls"], ws, ws) == ["ls"]
    b = command_line(SandboxConfig(tier="b"), ["ls"], ws, ws, (65534, 65534))
    assert b[0] == "/usr/bin/prlimit" and b[-5:] == ["--reuid=65534", "--regid=65534",
                                                      "--clear-groups", "--", "ls"]
    c = command_line(SandboxConfig(tier="c", workspace="ro"), ["ls"], ws, ws)
    assert c[0] == "/usr/bin/bwrap" and "--unshare-net" in c and "--ro-bind" in c
    assert c[c.index("/srv/ws") - 1] == "--ro-bind"


@pytest.mark.parametrize(("sandbox", "risk"), [
    (SandboxConfig(tier="c", workspace="ro"), "medium"),
    (SandboxConfig(tier="c"), "high"),
    (SandboxConfig(tier="b"), "high"),
])
def test_risk_is_medium_only_for_a_read_only_tier_c(sandbox: SandboxConfig, risk: str) -> None:
    registry = default_registry(ToolsConfig(process_exec_enabled=True, sandbox=sandbox))
    gate = PolicyGate.load(PolicyConfig(process_exec_enabled=True))
    verdict = GatePolicy(gate, registry).decide_tool(ToolRequest(
        identity=IdentityRec("user:alice", "01J00000000000000000000000", ""), session_id="S",
        run_id="R", tool_name="process.run", arguments={"argv": ["ls"]}, postures={}))
    assert verdict.risk_level == risk
