"""Approved calls across a SIGKILL of `palyra serve`: a decision acknowledged to its decider
is never lost, and one that was not acknowledged may be.

An approved call with side effects runs only once its decision is durable, and its
decider is answered then: killed mid-call, the decision stays approved and the call is
not run again (the run fails with `daemon_restarted`). An approved read-only call runs
first, and its decision lands with its result when the call is quick (in-process:
tests/engine/test_decision_commits.py); a slow one (seconds, here) has its decision
committed alone after `EngineConfig.decision_ride_s`, so its decider is answered while it
runs: killed mid-call, the decision stays approved, nobody is asked again, and the
harmless call runs again and finishes the run.
"""

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
APPROVE = {"decision": "APPROVAL_DECISION_APPROVE", "scope": "APPROVAL_SCOPE_ONCE",
           "reason": "ok"}


def test_a_sigkill_mid_approved_call(tmp_path: Path) -> None:
    toml = write_config(tmp_path, {"mcp.ro.slow": "ask_each_time", "mcp.rw.slow": "ask_each_time"})
    daemon = DaemonProcess(tmp_path / "data", env=clean_env(),
                           extra_args=("--config", str(toml))).start()
    try:
        base = f"http://127.0.0.1:{daemon.http_port}"
        user = {"authorization": f"Bearer {daemon.token}", "x-palyra-device-id": DEVICE,
                "x-palyra-principal": "user:alice"}

        def run(run_id: str) -> dict[str, Any]:
            got = httpx.get(f"{base}/v1/runs/{run_id}", headers=user, timeout=10).json()
            return dict(got["run"])

        def approval(approval_id: str) -> dict[str, Any]:
            got = httpx.get(f"{base}/v1/approvals/{approval_id}", headers=user, timeout=10)
            return dict(got.json()["approval"])

        def decide(approval_id: str) -> httpx.Response:
            return httpx.post(f"{base}/v1/approvals/{approval_id}:decide", headers=user,
                              json=APPROVE, timeout=60)

        runs, asked = {}, {}
        # The read-only call takes long enough to be killed in, short enough to rerun.
        for server, seconds in (("ro", 3), ("rw", 30)):
            made = httpx.post(f"{base}/v1/runs", headers=user, timeout=30, json={
                "v": 1, "complete": True,
                "input": {"text": f'/call mcp.{server}.slow {{"seconds": {seconds}}}'}})
            assert made.status_code == 200, made.text
            runs[server] = made.json()["run"]["runId"]
        for server, run_id in runs.items():
            wait_until(lambda r=run_id: run(r)["state"] == "RUN_STATE_WAITING_FOR_APPROVAL")
            asked[server] = run(run_id)["pendingApprovalId"]
        # Side effects: answered once durable, before the call starts.
        answered = decide(asked["rw"])
        assert answered.status_code == 200, answered.text
        wait_until(lambda: slow_calls_started(tmp_path / "rw") == 1)
        # Read-only and slow: the decider is not held for the call, answered while it runs.
        answered = decide(asked["ro"])
        assert answered.status_code == 200, answered.text
        assert slow_calls_started(tmp_path / "ro") == 1
        assert run(runs["ro"])["state"] == "RUN_STATE_IN_PROGRESS"
        daemon.kill()
        daemon.start()
        base = f"http://127.0.0.1:{daemon.http_port}"

        # The acknowledged decision survived; its call is not run again.
        assert approval(asked["rw"])["state"] == "APPROVAL_STATE_APPROVED"
        wait_until(lambda: run(runs["rw"])["state"] == "RUN_STATE_FAILED")
        assert run(runs["rw"])["endReason"] == "daemon_restarted"
        assert slow_calls_started(tmp_path / "rw") == 1
        # So did the read-only one: nobody is asked again, the harmless call runs again.
        assert approval(asked["ro"])["state"] == "APPROVAL_STATE_APPROVED"
        wait_until(lambda: run(runs["ro"])["state"] == "RUN_STATE_DONE")
        assert slow_calls_started(tmp_path / "ro") == 2
        assert json.loads(run(runs["ro"])["finalText"]) == {"result": "slept"}
    finally:
        daemon.stop()
