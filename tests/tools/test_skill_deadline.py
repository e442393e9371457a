"""A skill's wall-clock deadline: host calls use no fuel, so fuel alone cannot stop a
module that spends its time in them; the epoch deadline does, and the event loop
keeps running meanwhile."""

from __future__ import annotations

import asyncio
import hashlib
import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from palyra.tools import ToolContext, ToolRegistry
from palyra.tools.skills import Limits, register_skills
from palyra.tools.skills.epochs import EpochClock
from palyra.tools.skills.runtime import engine

# `nap` sleeps 50 ms in WASI's poll_oneoff (one relative clock subscription at 0,
# clock 1 = monotonic), forever; `get` asks palyra.http_get for the URL at 256.
NAPPER = """
(module
  (import "wasi_snapshot_preview1" "poll_oneoff"
    (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "nap") (result f64)
    (i32.store (i32.const 16) (i32.const 1))
    (i64.store (i32.const 24) (i64.const 50000000))
    (loop $again
      (drop (call $poll (i32.const 0) (i32.const 64) (i32.const 1) (i32.const 128)))
      (br $again))
    f64.const 0))
"""
GETTER = """
(module
  (import "palyra" "http_get" (func $get (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 256) "{url}")
  (func (export "get") (result f64)
    (f64.convert_i32_s (call $get (i32.const 256) (i32.const {length}) (i32.const 1024)
      (i32.const 4096)))))
"""


def _skill(root: Path, name: str, module: str, export: str, network: list[str]) -> None:
    directory = root / name
    directory.mkdir(parents=True)
    (directory / "m.wat").write_text(module)
    (directory / "skill.json").write_text(json.dumps({
        "name": name, "version": "0.1.0", "module": "m.wat",
        "sha256": hashlib.sha256(module.encode()).hexdigest(),
        "tools": [{"name": export, "description": export, "export": export, "params": []}],
        "capabilities": {"network": network, "filesystem": []}}))


async def test_a_skill_sleeping_in_host_calls_is_stopped_by_its_deadline(
        tmp_path: Path, ctx: ToolContext) -> None:
    _skill(tmp_path / "skills", "napper", NAPPER, "nap", [])
    registry = ToolRegistry()
    # Fuel for ages of naps (a nap costs a few units): only the deadline can stop it.
    register_skills(tmp_path / "skills", registry, limits=Limits(fuel=10**12, wall_s=0.5))
    beats = 0

    async def heartbeat() -> None:
        nonlocal beats
        while True:
            await asyncio.sleep(0.01)
            beats += 1

    beating = asyncio.create_task(heartbeat())
    began = time.monotonic()
    try:
        async with asyncio.timeout(10):
            result = await registry.execute("skill.napper.nap", {}, ctx, timeout_s=30)
    finally:
        beating.cancel()
    elapsed = time.monotonic() - began
    assert not result.success and not result.timed_out
    assert result.facts["skill.stopped"] == "deadline"
    assert result.facts["skill.deadline_s"] == "0.5"
    assert 0.5 <= elapsed < 3.0
    # It napped in a worker thread: the event loop ran all along.
    assert beats >= 10


@pytest.fixture
def trickler(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A URL whose server sends one byte every 50 ms, forever (each byte well within
    any read timeout), under a name that resolves to 127.0.0.1."""
    stop = threading.Event()

    class Trickle(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            while not stop.is_set():
                try:
                    self.wfile.write(b"x")
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.05)

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    real = socket.getaddrinfo

    def resolve(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "slow.test":
            return real(host, *args, **kwargs)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    try:
        yield f"http://slow.test:{port}/"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


async def test_http_get_gives_up_on_a_trickling_server_at_the_deadline(
        tmp_path: Path, ctx: ToolContext, trickler: str) -> None:
    _skill(tmp_path / "skills", "getter", GETTER.format(url=trickler, length=len(trickler)),
           "get", ["slow.test"])
    registry = ToolRegistry()
    register_skills(tmp_path / "skills", registry, limits=Limits(wall_s=0.5),
                    fetch_allow=("127.0.0.0/8",))
    began = time.monotonic()
    async with asyncio.timeout(10):
        result = await registry.execute("skill.getter.get", {}, ctx, timeout_s=30)
    assert time.monotonic() - began < 3.0
    # The host call gave up at the deadline (-3, HTTP_FAILED), and the module returned it.
    assert result.success and json.loads(result.output_json) == {"result": -3.0}
    assert "deadline passed mid-body" in result.facts["skill.refused"]


def test_the_epoch_clock_has_a_thread_only_while_calls_run() -> None:
    clock = EpochClock(engine(), tick_s=0.01)
    others = set(threading.enumerate())  # other tests' clocks, ending on their own

    def clocks() -> list[threading.Thread]:
        return [t for t in threading.enumerate()
                if t.name == "palyra-skill-epochs" and t not in others]

    with clock.ticking():
        assert len(clocks()) == 1
        with clock.ticking():  # a second call shares it
            assert len(clocks()) == 1
    deadline = time.monotonic() + 5
    while clocks() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not clocks()  # an engine left behind keeps no thread
    with clock.ticking():
        assert len(clocks()) == 1  # and the next call starts it again
