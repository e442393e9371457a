"""MCP tools through `palyra serve` and a SIGKILL mid-call: after the restart a
read-only call runs again and the run finishes; a call with side effects is not
re-run and the run fails with `daemon_restarted`, as for a built-in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from palyra.testing.spawn import DaemonProcess, clean_env
from tests.daemon.mcp_pair import slow_calls_started, wait_until, write_config

pytestmark = pytest.mark.slow
DEVICE = "01J00000000000000000000000"


def _run(base: str, headers: dict[str, str], run_id: str) -> dict[str, Any]:
    got = httpx.get(f"{base}/v1/runs/{run_id}", headers=headers, timeout=10).json()
    return dict(got["run"])


def test_a_sigkill_mid_call(tmp_path: Path) -> None:
    toml = write_config(tmp_path, {"mcp.rw.slow": "always_allow"})
    daemon = DaemonProcess(tmp_path / "data", env=clean_env(),
                           extra_args=("--config", str(toml))).start()
    try:
        base = f"http://127.0.0.1:{daemon.http_port}"
        user = {"authorization": f"Bearer {daemon.token}", "x-palyra-device-id": DEVICE,
                "x-palyra-principal": "user:alice"}
        runs = {}
        for server in ("ro", "rw"):
            made = httpx.post(f"{base}/v1/runs", headers=user, timeout=30, json={
                "v": 1, "complete": True,
                "input": {"text": f'/call mcp.{server}.slow {{"seconds": 2}}'}})
            assert made.status_code == 200, made.text
            runs[server] = made.json()["run"]["runId"]
        wait_until(lambda: slow_calls_started(tmp_path / "ro") == 1 and slow_calls_started(tmp_path / "rw") == 1)
        daemon.kill()
        daemon.start()
        base = f"http://127.0.0.1:{daemon.http_port}"

        def ended(run_id: str) -> bool:
            return _run(base, user, run_id)["state"] in (
                "RUN_STATE_DONE", "RUN_STATE_FAILED", "RUN_STATE_CANCELLED")

        wait_until(lambda: ended(runs["ro"]) and ended(runs["rw"]))
        ro, rw = _run(base, user, runs["ro"]), _run(base, user, runs["rw"])
        assert ro["state"] == "RUN_STATE_DONE", ro
        assert json.loads(ro["finalText"]) == {"result": "slept"}
        assert slow_calls_started(tmp_path / "ro") == 2  # it ran again
        assert rw["state"] == "RUN_STATE_FAILED", rw
        assert rw["endReason"] == "daemon_restarted"
        assert slow_calls_started(tmp_path / "rw") == 1  # never run twice
    finally:
        daemon.stop()
