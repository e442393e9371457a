"""``palyra skills`` changes are journaled, and a running daemon loads them at once.

With a daemon on the data dir the CLI asks it to reload (``ReloadSkills``): the
skill's tools join or leave the registry without a restart, and each change is
journaled under the caller's principal. With none, the CLI journals the change
itself. Real daemon, real journal, the repo's example skill.
"""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from palyra.journal import JournalStore
from palyra.testing.spawn import DaemonProcess
from palyra.tools.skills import skill_changes

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "skills" / "add"
USER = {"x-palyra-principal": "user:a", "x-palyra-device-id": "01J00000000000000000000000"}


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}


def _skills(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "palyra.cli.main", "skills", "--data-dir", str(data_dir), *args],
        capture_output=True, text=True, env=_env(), timeout=120, check=False)


def _changes(data_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    store = JournalStore.open(data_dir)
    try:
        return [(e.principal, dict(e.payload)) for e in store.read_range(0, 10_000)
                if e.kind == "skill.changed"]
    finally:
        store.close()


def _add(base: str, headers: dict[str, str]) -> dict[str, Any]:
    run = httpx.post(f"{base}/v1/runs", headers=headers, timeout=60, json={
        "input": {"text": '/call skill.demo.add {"a": 2, "b": 40}'}, "complete": True,
        "wait": True})
    assert run.status_code == 200, run.text
    reply: dict[str, Any] = json.loads(run.json()["run"]["finalText"])
    return reply


def test_a_running_daemon_loads_and_journals_each_change(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with DaemonProcess(data_dir, env=_env()) as daemon:
        base = f"http://127.0.0.1:{daemon.http_port}"
        user = {"authorization": f"Bearer {daemon.token}", **USER}
        admin = {**user, "x-palyra-principal": "admin:ops"}
        assert "denied" in _add(base, user)["error"]  # not installed yet

        installed = _skills(data_dir, "install", str(EXAMPLE))
        assert installed.returncode == 0, installed.stderr
        assert "loaded it: demo installed (journal position" in installed.stdout
        assert _add(base, user) == {"result": 42.0}  # no restart
        listed = httpx.get(f"{base}/v1/skills", headers=admin).json()["skills"]
        assert [(s["name"], s["state"], s["tools"]) for s in listed] == [
            ("demo", "enabled", ["skill.demo.add"])]
        assert httpx.get(f"{base}/v1/skills", headers=user).status_code == 403

        quarantined = _skills(data_dir, "quarantine", "demo")
        assert quarantined.returncode == 0, quarantined.stderr
        assert "demo quarantined" in quarantined.stdout
        assert "denied" in _add(base, user)["error"]  # at once, before any approval
        again = httpx.post(f"{base}/v1/skills:reload", headers=admin, json={})
        assert again.status_code == 200 and again.json().get("changes", []) == []
        refused = httpx.post(f"{base}/v1/skills:reload", headers=user, json={})
        assert refused.status_code == 403 and refused.json()["code"] == "PERMISSION_DENIED"
        assert _skills(data_dir, "remove", "demo").returncode == 0
    changes = _changes(data_dir)
    who = f"admin:{getpass.getuser()}"
    assert [(p, c["skill"], c["change"]) for p, c in changes] == [
        (who, "demo", "installed"), (who, "demo", "quarantined"), (who, "demo", "removed")]
    assert changes[0][1]["module_sha256"] == json.loads(
        (EXAMPLE / "skill.json").read_text())["sha256"]


def test_without_a_daemon_the_cli_journals_the_change(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    JournalStore.open(data_dir).close()  # a data dir with a journal, no daemon
    installed = _skills(data_dir, "install", str(EXAMPLE))
    assert installed.returncode == 0, installed.stderr
    assert "journaled at position 1 (no daemon running" in installed.stdout
    disabled = _skills(data_dir, "disable", "demo")
    assert disabled.returncode == 0, disabled.stderr
    assert [(c["skill"], c["change"], c["state"]) for _, c in _changes(data_dir)] == [
        ("demo", "installed", "enabled"), ("demo", "disabled", "disabled")]


def test_what_a_reload_calls_a_change() -> None:
    enabled = {"skill": "demo", "state": "enabled", "skill_id": "demo@1", "module_sha256": "a",
               "capabilities": ["read_only"], "tools": ["skill.demo.add"]}
    assert skill_changes({}, {"demo": enabled})[0]["change"] == "installed"
    assert skill_changes({"demo": enabled}, {})[0]["change"] == "removed"
    assert skill_changes({"demo": enabled}, {"demo": enabled}) == []
    swapped = {**enabled, "module_sha256": "b"}
    assert skill_changes({"demo": enabled}, {"demo": swapped})[0]["change"] == "updated"
    widened = {**enabled, "capabilities": ["network"]}
    assert skill_changes({"demo": enabled}, {"demo": widened})[0]["change"] == "updated"
    held = {**enabled, "state": "quarantined"}
    assert skill_changes({"demo": enabled}, {"demo": held})[0]["change"] == "quarantined"
