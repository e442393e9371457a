"""A delegation across a SIGKILL of the daemon while the child run works: after the restart
the parent's call finds the same child, both resume, and the parent gets the child's answer."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from palyra.testing.spawn import DaemonProcess, clean_env

pytestmark = pytest.mark.slow
DEVICE = "01J00000000000000000000000"
TASK = ("Start from 0 and add 1 to the running total 4 times, one add tool call per step, "
        "then reply with the final result.")


def _wait(check: object, seconds: float = 30.0) -> object:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()  # type: ignore[operator]
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_a_sigkill_while_the_child_runs_resumes_both(tmp_path: Path) -> None:
    # Each scripted model call takes 0.3 s, so the child is mid-loop when killed.
    env = {**clean_env(), "PALYRA_PROVIDER_SCRIPTED_DELAY_S": "0.3"}
    # The operator lets delegations run unasked (by default each one needs an approval).
    toml = tmp_path / "palyra.toml"
    toml.write_text('[policy]\ntool_postures = { "agent.delegate" = "always_allow" }\n')
    daemon = DaemonProcess(tmp_path / "data", env=env, extra_args=("--config", str(toml))).start()
    try:
        base = f"http://127.0.0.1:{daemon.http_port}"
        headers = {"authorization": f"Bearer {daemon.token}", "x-palyra-device-id": DEVICE,
                   "x-palyra-principal": "admin:ops"}
        agent = httpx.post(f"{base}/v1/agents", headers=headers,
                           json={"agent": {"displayName": "counter"}}).json()["agent"]
        call = "/call agent.delegate " + json.dumps({"agent_id": agent["agentId"], "task": TASK})
        run_id = httpx.post(f"{base}/v1/runs", headers=headers, json={
            "v": 1, "input": {"text": call}, "complete": True}).json()["run"]["runId"]

        def children() -> list[str]:
            run = httpx.get(f"{base}/v1/runs/{run_id}", headers=headers).json()["run"]
            return list(run.get("childRunIds", []))

        [child] = _wait(children)  # type: ignore[misc]
        _wait(lambda: httpx.get(f"{base}/v1/runs/{child}", headers=headers)
              .json()["run"].get("toolCallCount", 0) >= 1)
        daemon.kill()
        daemon.start()
        base = f"http://127.0.0.1:{daemon.http_port}"
        parent = _wait(lambda: (r := httpx.get(f"{base}/v1/runs/{run_id}", headers=headers)
                                .json()["run"])["state"] == "RUN_STATE_DONE" and r, 60)
        assert "result=4" in parent["finalText"]  # type: ignore[index]
        assert children() == [child]  # the same child, resumed, not a second one
        done = httpx.get(f"{base}/v1/runs/{child}", headers=headers).json()["run"]
        assert done["state"] == "RUN_STATE_DONE" and done["parentRunId"] == run_id
    finally:
        assert daemon.stop() == 0, daemon.log()[-3000:]
