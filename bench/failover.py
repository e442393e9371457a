"""``python -m bench failover``: how soon another daemon takes over a SIGKILLed daemon's runs.

Usage::

    python -m bench failover [--ttl SECONDS] [-r ROUNDS]

Two ``palyra serve`` daemons share one PostgreSQL journal (a throwaway server from
``palyra.testing.postgres``, fsync on) with ``[journal] lease_ttl_s`` = TTL. Each round
starts, on daemon A, a tool-loop run (K=2) that waits for an approval, SIGKILLs A, and
measures from the kill until daemon B holds the run's session lease (the takeover) and
until the run, approved through B, ends ``done`` with ``result=2``; then A is restarted
for the next round. The target is a takeover within 2 x TTL.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg

from palyra.testing.postgres import PostgresServer
from palyra.testing.spawn import DaemonProcess, clean_env

TOKEN = "bench-failover-token-0123456789abcdef0123"
HEADERS = {"authorization": f"Bearer {TOKEN}", "x-palyra-device-id": "01J00000000000000000000000",
           "x-palyra-principal": "admin:ops"}
TASK = ("Start from 0 and add 1 to the running total 2 times, one add tool call per step, "
        "then reply with the final result.")


def _until(check: Callable[[], Any], seconds: float, step_s: float = 0.005) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(step_s)
    raise TimeoutError("timed out")


def _base(daemon: DaemonProcess) -> str:
    return f"http://127.0.0.1:{daemon.http_port}"


def _run(daemon: DaemonProcess, run_id: str) -> dict[str, Any]:
    run: dict[str, Any] = httpx.get(f"{_base(daemon)}/v1/runs/{run_id}", headers=HEADERS,
                                    timeout=10).json()["run"]
    return run


def _waiting_run(daemon: DaemonProcess, key: str) -> tuple[str, str]:
    """Start a run on ``daemon`` that waits for an approval; its (run id, session id)."""
    base = _base(daemon)
    session = httpx.post(f"{base}/v1/sessions:resolve", headers=HEADERS,
                         json={"sessionKey": key}, timeout=10).json()["session"]
    httpx.post(f"{base}/v1/sessions/{session['sessionId']}/tool-postures", headers=HEADERS,
               json={"toolName": "add", "posture": "TOOL_POSTURE_ASK_EACH_TIME"},
               timeout=10).raise_for_status()
    run_id = httpx.post(f"{base}/v1/runs", headers=HEADERS, timeout=10, json={
        "v": 1, "sessionKey": key, "input": {"text": TASK}, "complete": True}).json()["run"]["runId"]
    _until(lambda: _run(daemon, run_id)["state"] == "RUN_STATE_WAITING_FOR_APPROVAL", 30)
    return run_id, session["sessionId"]


def _approve_to_end(daemon: DaemonProcess, run_id: str) -> dict[str, Any]:
    while True:
        run = _run(daemon, run_id)
        if run["state"] in ("RUN_STATE_DONE", "RUN_STATE_FAILED", "RUN_STATE_CANCELLED"):
            return run
        approval = run.get("pendingApprovalId", "")
        if run["state"] == "RUN_STATE_WAITING_FOR_APPROVAL" and approval:
            httpx.post(f"{_base(daemon)}/v1/approvals/{approval}:decide", headers=HEADERS,
                       timeout=10, json={"decision": "APPROVAL_DECISION_APPROVE",
                                         "scope": "APPROVAL_SCOPE_ONCE", "reason": "bench"})
        time.sleep(0.01)


def _holder(dsn: str, session_id: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT owner FROM journal_lease WHERE name = %s AND "
                           "expires_at > now()", ("session:" + session_id,)).fetchone()
    return str(row[0]) if row else ""


def _owned_by(dsn: str, session_id: str, daemon: DaemonProcess) -> Callable[[], bool]:
    return lambda: f"/{daemon.pid}/" in _holder(dsn, session_id)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench failover", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ttl", type=float, default=2.0, help="lease_ttl_s (default 2)")
    parser.add_argument("-r", "--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    takeovers: list[float] = []
    endings: list[float] = []
    with tempfile.TemporaryDirectory(prefix="palyra-failover-") as tmp, \
            PostgresServer(durable=True) as server:
        dsn = server.create_database()
        env = clean_env(PALYRA_JOURNAL_BACKEND="postgres", PALYRA_JOURNAL_DSN=dsn,
                        PALYRA_JOURNAL_LEASE_TTL_S=str(args.ttl), PALYRA_ADMIN_TOKEN=TOKEN)
        a = DaemonProcess(Path(tmp) / "a", env=env).start(60)
        b = DaemonProcess(Path(tmp) / "b", env=env).start(60)
        try:
            for i in range(args.rounds):
                run_id, session_id = _waiting_run(a, f"failover-{i}")
                assert f"/{a.pid}/" in _holder(dsn, session_id)
                a.kill()
                killed = time.monotonic()
                _until(_owned_by(dsn, session_id, b), 10 * args.ttl)
                takeovers.append(time.monotonic() - killed)
                run = _approve_to_end(b, run_id)
                endings.append(time.monotonic() - killed)
                ok = run["state"] == "RUN_STATE_DONE" and "result=2" in run["finalText"]
                print(f"round {i + 1}: takeover {takeovers[-1]:.2f} s, run done "
                      f"{endings[-1]:.2f} s after the kill, ok={ok}")
                if not ok:
                    return 1
                a.start(60)
        finally:
            a.kill()
            b.kill()
    worst = max(takeovers)
    print(f"lease TTL {args.ttl:g} s, {args.rounds} rounds: takeover median "
          f"{statistics.median(takeovers):.2f} s, max {worst:.2f} s "
          f"({worst / args.ttl:.2f} x TTL; target <= 2 x TTL: "
          f"{'met' if worst <= 2 * args.ttl else 'MISSED'}); run done median "
          f"{statistics.median(endings):.2f} s after the kill")
    return 0 if worst <= 2 * args.ttl else 1
