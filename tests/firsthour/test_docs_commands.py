"""The commands of docs/api.md, run with bash and curl exactly as written against a live
daemon (only the port differs): they return by themselves and show what the page says."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from palyra.testing.spawn import DaemonProcess

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
API = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")


def _block(after_heading: str) -> str:
    section = API[API.index(after_heading):]
    match = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert match is not None, after_heading
    return match.group(1)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    # Keep-alive comments far apart: a command that only ends at the next one hangs.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}
    env["PALYRA_HTTP_SSE_KEEPALIVE_S"] = "600"
    with DaemonProcess(tmp_path_factory.mktemp("docs") / "palyra-data", env=env) as proc:
        yield proc


def _bash(daemon: DaemonProcess, script: str) -> subprocess.CompletedProcess[str]:
    setup = _block("## Setup for the examples").replace("7142", str(daemon.http_port))
    return subprocess.run(["bash", "-euo", "pipefail", "-c", setup + script],
                          cwd=daemon.data_dir.parent, capture_output=True, text=True,
                          timeout=60, check=False)


def test_the_healthz_example_shows_a_fresh_daemons_fields(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}
    with DaemonProcess(tmp_path / "palyra-data", env=env) as fresh:
        got = httpx.get(f"http://127.0.0.1:{fresh.http_port}/healthz").json()
    example = _block("### `GET /healthz`")
    fresh_line = example.splitlines()[example.splitlines().index(
        next(x for x in example.splitlines() if "a fresh daemon" in x)) + 1]
    documented = json.loads(fresh_line.removeprefix("# ").replace("…", ""))
    assert set(documented) == set(got)


def test_the_approval_walkthrough_runs_as_written(daemon: DaemonProcess) -> None:
    done = _bash(daemon, _block("## A whole turn with an approval, HTTP only"))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.rstrip().endswith("result=1")
    # Step 3's last id, then step 5 resumes right after it: nothing skipped.
    seqs = [json.loads(line).get("tapeSeq", "0") for line in out.splitlines()
            if line.startswith('{"tapeSeq"') or line.startswith('{"status"')]
    last = max(int(s) for s in seqs)
    # (step 4's answer has no final newline, so the first "id:" may follow it)
    ids = [int(m) for m in re.findall(r"(?:^|\})id: (\d+)$", out, re.MULTILINE)]
    assert ids and ids[0] == last + 1 and ids == list(range(ids[0], ids[0] + len(ids)))
    assert "RUN_STATE_DONE" in out
