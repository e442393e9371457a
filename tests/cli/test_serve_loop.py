"""``palyra serve`` runs the daemon on uvloop (the wire's CPU per step, docs/bench.md)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pytest
import uvloop

import palyra.daemon.daemon
from palyra.cli import _serve
from palyra.config import PalyraConfig


def test_serve_runs_the_daemon_on_uvloop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loops: list[asyncio.AbstractEventLoop] = []

    async def daemon_body(config: PalyraConfig) -> int:
        # The real daemon body is the same coroutine; only which loop runs it is asked here.
        loops.append(asyncio.get_running_loop())
        return 0

    monkeypatch.setattr(palyra.daemon.daemon, "run_daemon", daemon_body)
    parser = argparse.ArgumentParser()
    _serve.add_config_flags(parser)
    args = parser.parse_args(["--data-dir", str(tmp_path / "data")])
    assert _serve.run(args) == 0
    assert len(loops) == 1 and isinstance(loops[0], uvloop.Loop)
