"""Compaction through `palyra serve` with its defaults (scripted provider, 480 tokens):
a long conversation over HTTP compacts, ExpandCompaction returns the covered events
exactly as the tape returned them before, a SIGKILL and restart leave the run
re-folded to the same input, and `palyra journal verify` (with the digests) passes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from palyra.testing.spawn import DaemonProcess, clean_env

pytestmark = pytest.mark.slow
DEVICE = "01J00000000000000000000000"


def _said(i: int) -> str:
    return f"note {i}: " + " ".join(f"item{i}-{j}" for j in range(40))


def _tape(base: str, headers: dict[str, str], run_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    after = -1
    while True:
        page = httpx.get(f"{base}/v1/runs/{run_id}/tape", headers=headers,
                         params={"after_seq": after, "limit": 1000}).json()
        events += page.get("events", [])
        if "nextAfterSeq" not in page:
            return events
        after = int(page["nextAfterSeq"])


def test_compaction_through_the_daemon(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    daemon = DaemonProcess(data_dir, env=clean_env()).start()
    try:
        base = f"http://127.0.0.1:{daemon.http_port}"
        user = {"authorization": f"Bearer {daemon.token}", "x-palyra-device-id": DEVICE,
                "x-palyra-principal": "user:alice"}
        made = httpx.post(f"{base}/v1/runs", headers=user, timeout=30,
                          json={"v": 1, "input": {"text": _said(0)}, "wait": True})
        assert made.status_code == 200, made.text
        run_id = made.json()["run"]["runId"]
        before_compaction: list[dict[str, Any]] = []
        for i in range(1, 9):
            before_compaction = _tape(base, user, run_id)
            sent = httpx.post(f"{base}/v1/runs/{run_id}/inputs", headers=user, timeout=30,
                              json={"input": {"text": _said(i)}, "wait": True})
            assert sent.status_code == 200, sent.text
            if any("sessionCompaction" in e for e in _tape(base, user, run_id)):
                break
        tape = _tape(base, user, run_id)
        [compaction] = [e for e in tape if "sessionCompaction" in e]
        body = compaction["sessionCompaction"]
        first, last = int(body.get("firstSeq", 0)), int(body["lastSeq"])
        assert body["strategy"] == "session_window_v1" and body["summariserModel"] == "scripted"
        expanded = httpx.get(f"{base}/v1/runs/{run_id}/compactions:expand", headers=user,
                             params={"compaction_seq": compaction["tapeSeq"]})
        assert expanded.status_code == 200, expanded.text
        got = expanded.json()
        assert got["digestMatches"] is True and got["digestSha256"] == body["digestSha256"]
        # Byte for byte what the tape answered before the compaction was written.
        originals = [e for e in before_compaction if first <= int(e.get("tapeSeq", 0)) <= last]
        assert got["events"] == originals and len(originals) == last - first + 1
        other = {**user, "x-palyra-principal": "user:mallory"}
        denied = httpx.get(f"{base}/v1/runs/{run_id}/compactions:expand", headers=other,
                           params={"compaction_seq": compaction["tapeSeq"]})
        assert denied.status_code in (403, 404)
        # A crash and restart: the run resumes from the tape, compaction included.
        daemon.kill()
        daemon.start()
        base = f"http://127.0.0.1:{daemon.http_port}"
        again = httpx.post(f"{base}/v1/runs/{run_id}/inputs", headers=user, timeout=30,
                           json={"input": {"text": "and one more"}, "wait": True})
        assert again.status_code == 200, again.text
        assert again.json()["run"]["finalText"] == "and one more"
        assert sum("sessionCompaction" in e for e in _tape(base, user, run_id)) == 1
        cli = subprocess.run(
            [sys.executable, "-m", "palyra.cli.main", "runs", "expand", run_id,
             str(compaction["tapeSeq"]), "--data-dir", str(data_dir)],
            capture_output=True, text=True, env=clean_env(), timeout=60, check=False)
        assert cli.returncode == 0, cli.stdout + cli.stderr
        lines = cli.stdout.splitlines()
        assert "session_compaction" in lines[0] and "matches" in lines[-1]
        assert len(lines) == 2 + last - first + 1
    finally:
        daemon.stop()
    verified = subprocess.run(
        [sys.executable, "-m", "palyra.cli.main", "journal", "verify", "--data-dir",
         str(data_dir)], capture_output=True, text=True, env=clean_env(), timeout=60,
        check=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.startswith("OK ")
