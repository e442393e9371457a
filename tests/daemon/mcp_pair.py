"""A `palyra serve` config with two MCP servers of the test files server: `ro`, whose
`slow` tool is declared read-only, and `rw`, whose tools have side effects; shared by the
daemon tests that SIGKILL a daemon mid-call."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

SERVER = Path(__file__).resolve().parents[1] / "tools" / "mcp" / "files_server.py"


def write_config(tmp_path: Path, postures: dict[str, str]) -> Path:
    """``palyra.toml`` under ``tmp_path`` with the two servers (each with its own state
    folder, where `slow` notes its calls) and the tool ``postures``."""
    toml = tmp_path / "palyra.toml"
    listed = ", ".join(f"{json.dumps(tool)} = {json.dumps(p)}" for tool, p in postures.items())
    toml.write_text(f'''
[policy]
tool_postures = {{ {listed} }}

[[tools.mcp]]
name = "ro"
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(SERVER))}, {json.dumps(str(tmp_path / "ro"))}]
tool_capabilities = {{ slow = ["read_only"] }}

[[tools.mcp]]
name = "rw"
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(SERVER))}, {json.dumps(str(tmp_path / "rw"))}]
''')
    for state in ("ro", "rw"):
        (tmp_path / state).mkdir()
    return toml


def wait_until(predicate: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def slow_calls_started(state: Path) -> int:
    """How many `slow` calls the server with state folder ``state`` has begun."""
    calls = state / "calls"
    return calls.read_text().count("slow started") if calls.exists() else 0
