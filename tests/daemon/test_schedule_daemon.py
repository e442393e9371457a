"""A scheduled prompt across a SIGKILL at its firing instant: whether the kill lands before
or after the firing's commit, the prompt runs exactly once."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from palyra.testing.spawn import DaemonProcess, clean_env

pytestmark = pytest.mark.slow
DEVICE = "01J00000000000000000000000"


@pytest.mark.parametrize("kill_after_s", [0.0, 0.05, 0.3])
def test_a_firing_runs_once_across_a_sigkill_at_its_instant(tmp_path: Path,
                                                            kill_after_s: float) -> None:
    daemon = DaemonProcess(tmp_path / "data", env=clean_env()).start()
    try:
        base = f"http://127.0.0.1:{daemon.http_port}"
        user = {"authorization": f"Bearer {daemon.token}", "x-palyra-device-id": DEVICE,
                "x-palyra-principal": "user:sched"}
        at_ms = int(time.time() * 1000) + 1500
        made = httpx.post(f"{base}/v1/schedules", headers=user, json={"schedule": {
            "atUnixMs": str(at_ms), "prompt": "the scheduled hello"}})
        assert made.status_code == 200, made.text
        schedule_id = made.json()["schedule"]["scheduleId"]
        time.sleep(max(0.0, at_ms / 1000 - time.time()) + kill_after_s)
        daemon.kill()
        daemon.start()
        base = f"http://127.0.0.1:{daemon.http_port}"
        deadline = time.monotonic() + 30
        runs: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            runs = httpx.get(f"{base}/v1/runs", headers=user).json().get("runs", [])
            if runs and all(r["state"] == "RUN_STATE_DONE" for r in runs):
                break
            time.sleep(0.1)
        time.sleep(0.5)  # anything that would fire twice has had its chance
        runs = httpx.get(f"{base}/v1/runs", headers=user).json().get("runs", [])
        assert len(runs) == 1, runs
        assert runs[0]["finalText"] == "the scheduled hello"
        [listed] = httpx.get(f"{base}/v1/schedules", headers=user).json()["schedules"]
        assert listed["scheduleId"] == schedule_id and int(listed["firedCount"]) == 1
    finally:
        assert daemon.stop() == 0, daemon.log()[-3000:]
