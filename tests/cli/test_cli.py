"""The ``palyra`` client commands against a real daemon, found through its data dir."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from palyra.testing.spawn import DaemonProcess

pytestmark = pytest.mark.slow

TEXT = ("Start from 0 and add 1 to the running total {k} times, one add tool call per step, "
        "then reply with the final result.")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}
    with DaemonProcess(tmp_path_factory.mktemp("cli") / "data", env=env) as proc:
        yield proc


def palyra(daemon: DaemonProcess, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Run the CLI with nothing but ``--data-dir`` to find the daemon and its token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}
    command = [sys.executable, "-m", "palyra.cli.main", *args, "--data-dir", str(daemon.data_dir)]
    if args[0] == "journal":
        command = [sys.executable, "-m", "palyra.cli.main", *args]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, env=env,
                          timeout=60, check=False)


def test_chat_one_message_sessions_and_tail(daemon: DaemonProcess) -> None:
    chat = palyra(daemon, "chat", "--session", "cli-demo", "-m", TEXT.format(k=2))
    assert chat.returncode == 0, chat.stderr
    assert "⚙ add" in chat.stdout and "result=2" in chat.stdout
    assert "done" in chat.stdout
    sessions = palyra(daemon, "sessions", "list")
    assert sessions.returncode == 0 and "cli-demo" in sessions.stdout
    run_id = next(line.split()[4] for line in sessions.stdout.splitlines() if "cli-demo" in line)
    tail = palyra(daemon, "runs", "tail", run_id)
    assert tail.returncode == 0
    assert tail.stdout.splitlines()[0].split()[:2] == ["0", "status"]
    assert "result=2" in tail.stdout
    resumed = palyra(daemon, "runs", "tail", run_id, "--after-seq", "5")
    assert resumed.stdout.splitlines()[0].split()[0] == "6"


def test_approvals_list_approve_and_abort(daemon: DaemonProcess) -> None:
    token = (daemon.data_dir / "admin.token").read_text().strip()
    headers = {"authorization": f"Bearer {token}", "x-palyra-principal": "user:web",
               "x-palyra-device-id": "01J00000000000000000000000"}
    base = f"http://127.0.0.1:{daemon.http_port}"
    runs = []
    for key in ("cli-hitl", "cli-abort"):
        session = httpx.post(f"{base}/v1/sessions:resolve", json={"sessionKey": key},
                             headers=headers).json()["session"]
        httpx.post(f"{base}/v1/sessions/{session['sessionId']}/tool-postures",
                   json={"toolName": "add", "posture": "ask_each_time"}, headers=headers)
        run = httpx.post(f"{base}/v1/runs", json={"sessionId": session["sessionId"],
                                                 "input": {"text": TEXT.format(k=1)},
                                                 "complete": True, "wait": True},
                         headers=headers).json()["run"]
        runs.append(run["runId"])
    listed = palyra(daemon, "approvals", "list")
    assert listed.returncode == 0, listed.stderr
    pending = [line.split()[0] for line in listed.stdout.splitlines()[1:] if runs[0] in line]
    assert len(pending) == 1
    approved = palyra(daemon, "approvals", "approve", pending[0])
    assert approved.returncode == 0, approved.stderr
    assert "approved by admin:" in approved.stdout
    followed = palyra(daemon, "runs", "tail", runs[0], "--follow")
    assert "result=1" in followed.stdout and "state=done" in followed.stdout
    aborted = palyra(daemon, "runs", "abort", runs[1])
    assert aborted.returncode == 0 and "state=cancelled" in aborted.stdout
    missing = palyra(daemon, "runs", "abort", "01M00000000000000000000000")
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr


def test_journal_commands_are_mounted(daemon: DaemonProcess) -> None:
    verified = palyra(daemon, "journal", "verify", "--data-dir", str(daemon.data_dir))
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith("OK")


def test_unreachable_daemon_is_reported(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}
    result = subprocess.run(
        [sys.executable, "-m", "palyra.cli.main", "sessions", "list", "--data-dir", str(tmp_path),
         "--address", "127.0.0.1:9", "--token", "x"],
        capture_output=True, text=True, env=env, timeout=60, check=False)
    assert result.returncode == 3 and "palyra serve" in result.stderr


def test_chat_answers_approvals_inline(daemon: DaemonProcess) -> None:
    """`palyra chat` shows the approval request and sends the typed answer on its stream."""
    token = (daemon.data_dir / "admin.token").read_text().strip()
    device = "01J0000000000000000000000C"
    headers = {"authorization": f"Bearer {token}", "x-palyra-principal": "user:chat",
               "x-palyra-device-id": device}
    base = f"http://127.0.0.1:{daemon.http_port}"
    session = httpx.post(f"{base}/v1/sessions:resolve", json={"sessionKey": "cli-inline"},
                         headers=headers).json()["session"]
    httpx.post(f"{base}/v1/sessions/{session['sessionId']}/tool-postures",
               json={"toolName": "add", "posture": "ask_each_time"}, headers=headers)
    chat = palyra(daemon, "chat", "--session", "cli-inline", "--principal", "user:chat",
                  "--device-id", device, "-m", TEXT.format(k=2), stdin="y\ns\n")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout.count("? approval needed: add") == 2
    assert "result=2" in chat.stdout and "done" in chat.stdout


def test_usage_reports_the_callers_model_calls(daemon: DaemonProcess) -> None:
    import json

    before = palyra(daemon, "usage", "--json")
    assert before.returncode == 0, before.stderr

    def calls(answer: dict[str, object]) -> int:
        lines = answer.get("lines", [])
        assert isinstance(lines, list)
        [day] = [line for line in lines if line["period"].startswith("day:")]
        return int(day.get("totals", {}).get("calls", 0))

    chat = palyra(daemon, "chat", "--session", "cli-usage", "-m", TEXT.format(k=1))
    assert chat.returncode == 0, chat.stderr
    after = json.loads(palyra(daemon, "usage", "--json").stdout)
    assert calls(after) == calls(json.loads(before.stdout)) + 2  # the tool call, the answer
    table = palyra(daemon, "usage")
    assert table.returncode == 0 and table.stdout.split()[:3] == ["SCOPE", "SUBJECT", "PERIOD"]
    assert "principal" in table.stdout
    bad = palyra(daemon, "usage", "--day", "yesterday")
    assert bad.returncode != 0 and "YYYY-MM-DD" in bad.stderr
