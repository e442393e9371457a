"""``palyra journal checkpoint`` with and without a running daemon.

With a daemon on the data dir the checkpoint is taken over gRPC
(``JournalService.CreateCheckpoint``, found via ``daemon.json`` and
``admin.token``); with none, the CLI opens the data dir itself; when neither
works the DATA_DIR_LOCKED error says what to do.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from palyra.cli import journal_cmd
from palyra.daemon.discovery import DaemonInfo, write_daemon_info
from palyra.journal import EventDraft, JournalStore, verify_store
from palyra.testing.spawn import DaemonProcess

pytestmark = pytest.mark.slow


def _env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}, **extra}


def _checkpoint(data_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "palyra.cli.main", "journal", "checkpoint",
         "--data-dir", str(data_dir)],
        capture_output=True, text=True, env=_env(**env), timeout=60, check=False)


def _fields(line: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in line.split() if "=" in part)


def test_checkpoint_through_the_running_daemon(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with DaemonProcess(data_dir, env=_env()) as daemon:
        headers = {"authorization": f"Bearer {daemon.token}", "x-palyra-principal": "user:a",
                   "x-palyra-device-id": "01J00000000000000000000000"}
        base = f"http://127.0.0.1:{daemon.http_port}"
        run = httpx.post(f"{base}/v1/runs", headers=headers, timeout=30, json={
            "input": {"text": "hello"}, "complete": True, "wait": True})
        assert run.status_code == 200, run.text
        head = httpx.get(f"{base}/v1/journal/head", headers=headers).json()

        made = _checkpoint(data_dir)
        assert made.returncode == 0, made.stderr
        fields = _fields(made.stdout)
        assert fields["by"] == "daemon"
        assert int(fields["position"]) == int(head["eventCount"])
        assert fields["head"] == head["headHash"]

        # The daemon refuses a non-operator principal, and the CLI says so.
        refused = _checkpoint(data_dir, PALYRA_PRINCIPAL="user:a")
        assert refused.returncode == 2
        assert "PERMISSION_DENIED" in refused.stderr and "'admin:'" in refused.stderr
        # Over HTTP too.
        denied = httpx.post(f"{base}/v1/journal:checkpoint", headers=headers, json={})
        assert denied.status_code == 403 and denied.json()["code"] == "PERMISSION_DENIED"
        # (A refused stream is a plain 403 too, not an SSE stream with an error event.)
        export = httpx.get(f"{base}/v1/journal:export", headers=headers)
        assert export.status_code == 403 and export.json()["code"] == "PERMISSION_DENIED"
    report = verify_store(data_dir, trusted_keys=[bytes.fromhex(fields["key"])])
    # Ours vouches for the head, so the stop had nothing newer to sign.
    assert report.ok and report.checkpoints == 1
    assert report.head_position == int(fields["position"])


def test_checkpoint_without_a_daemon_opens_the_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"

    async def fill() -> None:
        async with JournalStore.open(data_dir) as store:
            await store.append([EventDraft(kind="test.event", actor="t", payload={"i": i})
                                for i in range(3)])

    asyncio.run(fill())
    made = _checkpoint(data_dir)
    assert made.returncode == 0, made.stderr
    fields = _fields(made.stdout)
    assert fields["position"] == "3" and made.stdout.rstrip().endswith(f"by=data dir {data_dir}")
    assert verify_store(data_dir).checkpoints == 1


def test_locked_data_dir_without_an_answering_daemon_says_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = JournalStore.open(data_dir)  # holds the writer lock, like a daemon
    try:
        write_daemon_info(data_dir, DaemonInfo(
            pid=os.getpid(), grpc_host="127.0.0.1", grpc_port=port, http_host="127.0.0.1",
            http_port=port, data_dir=str(data_dir), version="test"))
        code = journal_cmd.checkpoint(["--data-dir", str(data_dir)])
    finally:
        store.close()
    err = capsys.readouterr().err
    assert code == 2
    assert "DATA_DIR_LOCKED" in err
    assert f"127.0.0.1:{port} did not answer" in err
    assert "daemon.json" in err and "retry" in err
