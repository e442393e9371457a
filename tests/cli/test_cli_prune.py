"""Retention through the daemon and the CLI: ``palyra journal prune`` and the periodic prune.

After a prune, verify passes (live dir and bundle, with pruned positions
counted), and a tape cursor into pruned data is answered CURSOR_TRUNCATED over
HTTP (410) and gRPC (OUT_OF_RANGE), on the page RPC and on the watch stream;
a run that is not terminal keeps its whole tape.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from palyra_gen.palyra import v1

from palyra.journal import EventDraft, JournalStore, export_bundle, verify_bundle, verify_store
from palyra.testing.spawn import DaemonProcess

pytestmark = pytest.mark.slow
DEVICE = "01J00000000000000000000000"


def _env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}, **extra}


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "palyra.cli.main", "journal", *args],
                          capture_output=True, text=True, env=_env(**env), timeout=120,
                          check=False)


def _fields(line: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in line.split() if "=" in part)


def _run(base: str, headers: dict[str, str], *, complete: bool) -> str:
    reply = httpx.post(f"{base}/v1/runs", headers=headers, timeout=30, json={
        "input": {"text": "hello"}, "complete": complete, "wait": True})
    assert reply.status_code == 200, reply.text
    run_id: str = reply.json()["run"]["runId"]
    return run_id


def _check_truncated_everywhere(daemon: DaemonProcess, headers: dict[str, str],
                                done: str, live: str) -> None:
    base = f"http://127.0.0.1:{daemon.http_port}"
    page = httpx.get(f"{base}/v1/runs/{done}/tape", headers=headers, params={"after_seq": -1})
    assert page.status_code == 410, page.text
    body = page.json()
    assert body["code"] == "CURSOR_TRUNCATED" and "earliest readable cursor" in body["message"]
    watch = httpx.get(f"{base}/v1/runs/{done}/events", headers=headers,
                      params={"after_seq": -1, "no_follow": "true"})
    assert watch.status_code == 410 and watch.json()["code"] == "CURSOR_TRUNCATED"
    # The open run kept its whole tape.
    kept = httpx.get(f"{base}/v1/runs/{live}/tape", headers=headers, params={"after_seq": -1})
    assert kept.status_code == 200 and kept.json()["events"][0].get("tapeSeq", "0") in (0, "0")

    async def over_grpc() -> None:
        channel = Channel("127.0.0.1", daemon.grpc_port)
        try:
            stub = v1.GatewayServiceStub(channel, metadata=headers)
            with pytest.raises(GRPCError) as exc:
                await stub.list_run_tape(v1.ListRunTapeRequest(run_id=done, after_seq=-1))
            assert exc.value.status is Status.OUT_OF_RANGE
            assert "earliest readable cursor" in (exc.value.message or "")
            with pytest.raises(GRPCError) as exc:
                async for _ in stub.watch_run(v1.WatchRunRequest(run_id=done, after_seq=-1)):
                    pass
            assert exc.value.status is Status.OUT_OF_RANGE
        finally:
            channel.close()

    asyncio.run(over_grpc())


def test_prune_through_the_running_daemon(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with DaemonProcess(data_dir, env=_env()) as daemon:
        headers = {"authorization": f"Bearer {daemon.token}", "x-palyra-principal": "user:a",
                   "x-palyra-device-id": DEVICE}
        base = f"http://127.0.0.1:{daemon.http_port}"
        # The finished run first: retention prunes a prefix, and a run that is not
        # terminal stops it at its first record.
        done = _run(base, headers, complete=True)
        live = _run(base, headers, complete=False)
        pruned = _cli("prune", "--older-than", "0", "--data-dir", str(data_dir))
        assert pruned.returncode == 0, pruned.stderr
        fields = _fields(pruned.stdout)
        assert fields["by"] == "daemon"
        assert int(fields["records"]) > 0 and int(fields["pruned_through"]) > 0
        head = httpx.get(f"{base}/v1/journal/head", headers=headers).json()
        assert head["prunedThrough"] == fields["pruned_through"]
        _check_truncated_everywhere(daemon, headers, done, live)
        # A non-operator may not prune.
        denied = httpx.post(f"{base}/v1/journal:prune", headers=headers,
                            json={"olderThanDays": 0})
        assert denied.status_code == 403 and denied.json()["code"] == "PERMISSION_DENIED"
        admin = {**headers, "x-palyra-principal": "admin:ops"}
        verified = httpx.post(f"{base}/v1/journal:verify", headers=admin, json={}).json()
        assert verified["ok"] is True
        assert int(verified["prunedPositions"]) == int(fields["pruned_through"])
        bad = httpx.post(f"{base}/v1/journal:prune", headers=admin, json={"olderThanDays": -1})
        assert bad.status_code == 400 and bad.json()["code"] == "INVALID_ARGUMENT"
    report = verify_store(data_dir)
    assert report.ok and report.pruned == int(fields["pruned_through"]), report.summary()
    checked = _cli("verify", "--data-dir", str(data_dir))
    assert checked.returncode == 0 and f"pruned={report.pruned}" in checked.stdout
    export_bundle(data_dir, tmp_path / "b.ndjson")
    assert verify_bundle(tmp_path / "b.ndjson").ok


def test_the_daemon_prunes_on_its_own_when_configured(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = _env(PALYRA_JOURNAL_RETENTION_MAX_AGE_DAYS="0.00002",  # 1.7 s
               PALYRA_JOURNAL_RETENTION_INTERVAL_S="0.2")
    with DaemonProcess(data_dir, env=env) as daemon:
        headers = {"authorization": f"Bearer {daemon.token}", "x-palyra-principal": "user:a",
                   "x-palyra-device-id": DEVICE}
        base = f"http://127.0.0.1:{daemon.http_port}"
        done = _run(base, headers, complete=True)
        live = _run(base, headers, complete=False)
        deadline = time.monotonic() + 30
        while True:
            page = httpx.get(f"{base}/v1/runs/{done}/tape", headers=headers,
                             params={"after_seq": -1})
            if page.status_code == 410 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert page.status_code == 410, page.text
        _check_truncated_everywhere(daemon, headers, done, live)
    report = verify_store(data_dir)
    assert report.ok and report.pruned > 0, report.summary()


def test_prune_without_a_daemon_opens_the_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"

    async def fill() -> None:
        async with JournalStore.open(data_dir) as store:
            for i in range(3):
                await store.append([EventDraft(kind="test.event", actor="t", payload={"i": i},
                                               ts_ms=1000 + i)])

    asyncio.run(fill())
    assert _cli("prune", "--older-than", "-1", "--data-dir", str(data_dir)).returncode == 2
    pruned = _cli("prune", "--older-than", "1", "--data-dir", str(data_dir))
    assert pruned.returncode == 0, pruned.stderr
    fields = _fields(pruned.stdout)
    assert fields["records"] == "2" and fields["pruned_through"] == "2"
    assert pruned.stdout.rstrip().endswith(f"by=data dir {data_dir}")
    assert verify_store(data_dir).pruned == 2
    _cli("prune", "--older-than", "1", "--data-dir", str(data_dir))  # the last old record
    again = _cli("prune", "--older-than", "1", "--data-dir", str(data_dir))
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == ("nothing to prune: no record older than 1 days outside "
                                    f"live runs (by=data dir {data_dir})")
    assert "head=000" not in again.stdout
