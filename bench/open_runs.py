"""``python -m bench open-runs``: memory per open run, and what completing them gives back.

Against a real daemon (``palyra serve`` on loopback, durable journal): after a warm-up,
``--runs`` runs are started over HTTP and left open (each answered, none completed), then
all are completed. The daemon's ``/proc/<pid>/status`` is read idle, with the runs open
and after they complete, each after a short settle. Reported per open run:

* ``anon_kib_per_open_run``: anonymous resident memory (``RssAnon``): the Python objects,
  the allocator's arenas, native buffers — what an open run really costs;
* ``file_kib_per_open_run``: file-backed resident pages (``RssFile``): mostly the LMDB map
  and the commit log the runs' events were written to; the kernel may drop them;
* ``rss_kib_per_open_run``: both (``VmRSS``), what ``ps`` shows;
* after completion: the same three as totals against the idle daemon (MiB), so memory
  not given back after the runs end shows.

Usage::

    python -m bench open-runs [--runs 2000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from palyra.testing.spawn import DaemonProcess, clean_env

FIELDS = ("VmRSS", "RssAnon", "RssFile")
TOKEN = "bench-open-runs"
HEADERS = {"authorization": f"Bearer {TOKEN}", "x-palyra-principal": "user:bench",
           "x-palyra-device-id": "01J00000000000000000000000"}


def _status(pid: int) -> dict[str, int]:
    """The resident-memory fields of ``pid``, in KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in FIELDS:
            out[name] = int(value.split()[0])
    return out


def _settled(pid: int, settle_s: float) -> dict[str, int]:
    time.sleep(settle_s)
    return _status(pid)


def run(runs: int, settle_s: float = 2.0) -> dict[str, Any]:
    """Start, measure, complete and measure ``runs`` runs on a fresh daemon."""
    with tempfile.TemporaryDirectory(prefix="bench-open-runs-") as tmp:
        env = clean_env(PALYRA_ADMIN_TOKEN=TOKEN)
        with DaemonProcess(Path(tmp) / "data", env=env) as daemon, httpx.Client(
                base_url=f"http://127.0.0.1:{daemon.http_port}", headers=HEADERS,
                timeout=60) as client:
            pid = daemon.proc.pid if daemon.proc is not None else 0

            def start(i: int, prefix: str) -> str:
                answer = client.post("/v1/runs", json={"sessionKey": f"{prefix}{i}",
                                                       "input": {"text": "hi"}, "wait": True})
                answer.raise_for_status()
                return str(answer.json()["run"]["runId"])

            def complete(run_id: str) -> None:
                client.post(f"/v1/runs/{run_id}:complete", json={}).raise_for_status()

            for run_id in [start(i, "warm") for i in range(50)]:
                complete(run_id)
            idle = _settled(pid, settle_s)
            started = time.perf_counter()
            ids = [start(i, "open") for i in range(runs)]
            start_s = time.perf_counter() - started
            opened = _settled(pid, settle_s)
            for run_id in ids:
                complete(run_id)
            done = _settled(pid, settle_s)
    per_run = {f: round((opened[f] - idle[f]) * 1024 / runs / 1000, 1) for f in FIELDS}
    after = {f: round((done[f] - idle[f]) / 1024, 1) for f in FIELDS}
    return {
        "runs": runs, "start_ms_per_run": round(start_s * 1000 / runs, 2),
        "idle_mib": {f: round(idle[f] / 1024, 1) for f in FIELDS},
        "anon_kib_per_open_run": per_run["RssAnon"], "file_kib_per_open_run": per_run["RssFile"],
        "rss_kib_per_open_run": per_run["VmRSS"],
        "after_completion_over_idle_mib": after,
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench open-runs")
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    result = run(args.runs)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
