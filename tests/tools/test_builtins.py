"""Built-in tools, each through the registry's execute path."""

from __future__ import annotations

import asyncio
import http.server
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from palyra.tools import (
    Capability,
    ToolContext,
    ToolRegistry,
    ToolResult,
    ToolsConfig,
    default_registry,
    is_sensitive,
)


def _out(result: ToolResult) -> Any:
    assert result.success, result.error
    return msgspec.json.decode(result.output_json)


@pytest.fixture
def registry() -> ToolRegistry:
    return default_registry(ToolsConfig(process_exec_enabled=True))


def test_capabilities_and_sensitivity(registry: ToolRegistry) -> None:
    sensitive = {t.name for t in registry if is_sensitive(t.capabilities)}
    assert sensitive == {"fs.write", "fs.apply_patch", "http.fetch", "process.run"}
    assert registry.get("process.run") is not None
    assert Capability.PROCESS_EXEC in registry.get("process.run").capabilities  # type: ignore[union-attr]
    assert is_sensitive([])  # undeclared capabilities count as dangerous
    assert "fs.write" not in default_registry(ToolsConfig(disabled=frozenset({"fs.write"})))


async def test_echo_and_time(registry: ToolRegistry, ctx: ToolContext) -> None:
    assert _out(await registry.execute("echo", {"text": "hi"}, ctx)) == {"text": "hi"}
    now = _out(await registry.execute("time.now", {}, ctx))
    assert isinstance(now["unix_ms"], int) and now["iso"].endswith("+00:00")


async def test_memory_search(registry: ToolRegistry, workspace: Path) -> None:
    no_hook = ToolContext(workspace_dir=workspace)
    assert _out(await registry.execute("memory.search", {"query": "x"}, no_hook)) == {"hits": []}
    calls: list[tuple[str, int]] = []

    async def hook(query: str, limit: int) -> list[dict[str, Any]]:
        calls.append((query, limit))
        return [{"text": "remembered", "score": 0.9}]

    with_hook = ToolContext(workspace_dir=workspace, memory_search=hook)
    out = _out(await registry.execute("memory.search", {"query": "q", "limit": 500}, with_hook))
    assert out == {"hits": [{"text": "remembered", "score": 0.9}]}
    assert calls == [("q", 50)]  # limit clamped


async def test_fs_read_and_list(registry: ToolRegistry, ctx: ToolContext) -> None:
    read = _out(await registry.execute("fs.read", {"path": "notes.txt"}, ctx))
    assert read["content"] == "hello notes" and read["truncated"] is False
    listing = _out(await registry.execute("fs.list", {}, ctx))
    names = [e["name"] for e in listing["entries"]]
    assert names == ["notes.txt", "sub"]  # .git hidden


async def test_fs_read_large_file_truncated(
    registry: ToolRegistry, ctx: ToolContext, workspace: Path
) -> None:
    (workspace / "big.txt").write_text("x" * 100_000)
    result = await registry.execute("fs.read", {"path": "big.txt"}, ctx)
    out = _out(result)
    assert result.truncated and out["truncated"] and out["size"] == 100_000
    assert len(out["content"]) == 48 * 1024


@pytest.mark.parametrize(
    ("tool", "path", "fragment"),
    [
        ("fs.read", "../outside.txt", "outside the workspace"),
        ("fs.read", "sub/../../outside.txt", "outside the workspace"),
        ("fs.read", "/etc/passwd", "outside the workspace"),
        ("fs.read", ".git/config", "protected directory '.git'"),
        ("fs.read", "sub/../.GIT/config", "protected directory '.GIT'"),
        ("fs.list", ".git", "protected directory"),
        ("fs.write", ".ssh/id_rsa", "protected directory '.ssh'"),
        ("fs.write", "x/.aws/credentials", "protected directory '.aws'"),
        ("fs.read", "missing.txt", "is not a file"),
        ("fs.list", "notes.txt", "is not a directory"),
    ],
)
async def test_fs_blocked_paths(
    registry: ToolRegistry, ctx: ToolContext, tool: str, path: str, fragment: str
) -> None:
    args = {"path": path, "content": "x"} if tool == "fs.write" else {"path": path}
    result = await registry.execute(tool, args, ctx)
    assert not result.success
    assert fragment in result.error


async def test_symlinks_cannot_escape(
    registry: ToolRegistry, ctx: ToolContext, workspace: Path
) -> None:
    (workspace / "link_out").symlink_to(workspace.parent / "outside.txt")
    (workspace / "link_git").symlink_to(workspace / ".git")
    (workspace / "dir_out").symlink_to(workspace.parent)
    for args, tool in [
        ({"path": "link_out"}, "fs.read"),
        ({"path": "link_git/config"}, "fs.read"),
        ({"path": "dir_out/outside.txt"}, "fs.read"),
        ({"path": "link_out", "content": "pwned"}, "fs.write"),
    ]:
        result = await registry.execute(tool, args, ctx)
        assert not result.success, (tool, args)
    assert (workspace.parent / "outside.txt").read_text() == "secret"


async def test_fs_write(registry: ToolRegistry, ctx: ToolContext, workspace: Path) -> None:
    out = _out(await registry.execute("fs.write", {"path": "new/d/f.txt", "content": "é"}, ctx))
    assert out == {"path": "new/d/f.txt", "bytes_written": 2}
    assert (workspace / "new" / "d" / "f.txt").read_text() == "é"
    assert not (await registry.execute("fs.write", {"path": "sub", "content": ""}, ctx)).success
    assert not (await registry.execute("fs.write", {"path": ".", "content": ""}, ctx)).success


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"y" * 100_000 if self.path == "/big" else b"hello fetch"
        self.send_response(200)
        self.send_header("content-type", "text/plain; charset=utf-8")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def http_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


LOOPBACK_ALLOWED = ToolsConfig(fetch_allow=("127.0.0.1/32",))


async def test_http_fetch(ctx: ToolContext, http_url: str) -> None:
    registry = default_registry(LOOPBACK_ALLOWED)
    out = _out(await registry.execute("http.fetch", {"url": f"{http_url}/small"}, ctx))
    assert (out["status"], out["body"], out["truncated"]) == (200, "hello fetch", False)
    assert out["content_type"].startswith("text/plain")
    big = await registry.execute("http.fetch", {"url": f"{http_url}/big"}, ctx)
    assert big.truncated and len(_out(big)["body"]) == 48 * 1024


async def test_http_fetch_rejects_other_schemes(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = await registry.execute("http.fetch", {"url": "file:///etc/passwd"}, ctx)
    assert not result.success and "only http and https" in result.error
    closed = await default_registry(LOOPBACK_ALLOWED).execute(
        "http.fetch", {"url": "http://127.0.0.1:9/"}, ctx)
    assert not closed.success and "ConnectError" in closed.error


async def test_process_run(registry: ToolRegistry, ctx: ToolContext, workspace: Path) -> None:
    code = "import os,sys; print(os.getcwd()); print('err', file=sys.stderr); sys.exit(3)"
    out = _out(await registry.execute("process.run", {"argv": [sys.executable, "-c", code]}, ctx))
    assert out["exit_code"] == 3
    assert out["stdout"].strip() == str(ctx.workspace_dir.resolve())
    assert out["stderr"].strip() == "err"
    sub = _out(
        await registry.execute(
            "process.run", {"argv": [sys.executable, "-c", code], "cwd": "sub"}, ctx
        )
    )
    assert sub["stdout"].strip().endswith("sub")


async def test_process_run_env_has_no_secrets(
    registry: ToolRegistry, ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    code = "import os; print(os.environ.get('OPENAI_API_KEY', 'absent'))"
    out = _out(await registry.execute("process.run", {"argv": [sys.executable, "-c", code]}, ctx))
    assert out["stdout"].strip() == "absent"


async def test_process_run_output_capped(registry: ToolRegistry, ctx: ToolContext) -> None:
    code = "import sys; sys.stdout.write('z' * 200000)"
    result = await registry.execute("process.run", {"argv": [sys.executable, "-c", code]}, ctx)
    out = _out(result)
    assert result.truncated and len(out["stdout"]) == 24 * 1024


async def test_process_run_errors(registry: ToolRegistry, ctx: ToolContext) -> None:
    missing = await registry.execute("process.run", {"argv": ["/nonexistent/prog"]}, ctx)
    assert not missing.success and "cannot start" in missing.error
    empty = await registry.execute("process.run", {"argv": []}, ctx)
    assert not empty.success and "argv must not be empty" in empty.error
    escape = await registry.execute("process.run", {"argv": ["true"], "cwd": ".."}, ctx)
    assert not escape.success and "outside the workspace" in escape.error


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


_SLEEPER = (
    "import os, subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)'])\n"
    "open('pids.tmp', 'w').write(f'{os.getpid()} {child.pid}')\n"
    "os.rename('pids.tmp', 'pids')\n"
    "time.sleep(3600)\n"
)


def _read_pids(path: Path) -> list[int]:
    # Blocking poll, run in a thread; the child renames the file into place
    # atomically once both pids are known.
    while not path.exists():
        time.sleep(0.01)
    return [int(p) for p in path.read_text().split()]


def _wait_gone(pid: int) -> bool:
    for _ in range(500):
        if not _alive(pid) or _is_zombie(pid):
            return True
        time.sleep(0.01)
    return False


async def test_process_run_cancel_kills_child_and_grandchild(
    registry: ToolRegistry, ctx: ToolContext, workspace: Path
) -> None:
    argv = [sys.executable, "-c", _SLEEPER]
    task = asyncio.create_task(registry.execute("process.run", {"argv": argv}, ctx))
    pids = await asyncio.to_thread(_read_pids, workspace / "pids")
    assert all(_alive(p) for p in pids)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The direct child is reaped by the tool; the grandchild was in its
    # process group and got SIGKILL (it may linger as a zombie of init briefly).
    assert not _alive(pids[0])
    assert await asyncio.to_thread(_wait_gone, pids[1])


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (FileNotFoundError, IndexError):
        return False


async def test_process_run_timeout_kills_child(registry: ToolRegistry, ctx: ToolContext) -> None:
    argv = [sys.executable, "-c", "import time; time.sleep(3600)"]
    # Returning at all proves the child was killed: the tool reaps it before
    # reporting the timeout.
    result = await registry.execute("process.run", {"argv": argv}, ctx, timeout_s=0.3)
    assert result.timed_out and not result.success
    assert "timed out after 0.3s" in result.error
