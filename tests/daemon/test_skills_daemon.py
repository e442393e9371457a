"""A skill through `palyra serve`: installed with `palyra skills`, loaded at start,
journaled as `skill.loaded` (id, module digest, capabilities, state), and called."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from palyra.cli.main import main as palyra
from palyra.journal import JournalStore
from palyra.testing.spawn import DaemonProcess, clean_env

pytestmark = pytest.mark.slow
DEVICE = "01J00000000000000000000000"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "skills" / "add"


def test_a_skill_through_the_daemon(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    assert palyra(["skills", "--data-dir", str(data_dir), "install", str(EXAMPLE)]) == 0
    daemon = DaemonProcess(data_dir, env=clean_env()).start()
    try:
        base = f"http://127.0.0.1:{daemon.http_port}"
        user = {"authorization": f"Bearer {daemon.token}", "x-palyra-device-id": DEVICE,
                "x-palyra-principal": "user:alice"}
        made = httpx.post(f"{base}/v1/runs", headers=user, timeout=30, json={
            "v": 1, "complete": True, "wait": True,
            "input": {"text": '/call skill.demo.add {"a": 20, "b": 22}'}})
        assert made.status_code == 200, made.text
        assert json.loads(made.json()["run"]["finalText"]) == {"result": 42.0}
    finally:
        daemon.stop()
    store = JournalStore.open(data_dir)
    try:
        loaded = [e for e in store.read_range(0, 10_000) if e.kind == "skill.loaded"]
    finally:
        store.close()
    [event] = loaded
    assert event.payload["skill_id"] == "demo@1.0.0" and event.payload["state"] == "enabled"
    assert event.payload["module_sha256"] == json.loads(
        (EXAMPLE / "skill.json").read_text())["sha256"]
    assert event.payload["capabilities"] == ["read_only"]
