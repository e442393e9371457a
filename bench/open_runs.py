"""``python -m bench open-runs``: memory per open run, and what completing them gives back.

Against a real daemon (``palyra serve`` on loopback, durable journal): the daemon's
``/proc/<pid>/status`` is read once started (before any run), idle after a warm-up of 50
runs, with ``--runs`` runs started over HTTP and left open (each answered, none completed),
and after they all complete; ``--rounds`` more rounds of open-then-complete follow, to
show whether what stays is reused or grows. Each reading waits ``--settle`` seconds of
quiet first, long enough for the daemon's idle trim (``daemon/trim.py``, a look every 5 s).

* ``anon_kib_per_open_run``: anonymous resident memory (``RssAnon``): the Python objects,
  the allocator's arenas, native buffers: what an open run costs the daemon;
* ``file_kib_per_open_run``: file-backed resident pages (``RssFile``) in the daemon's
  ``VmRSS``: the pages of LMDB's map (``data.mdb``) that the runs' commits wrote and
  read. The daemon's idle trim unmaps them once it is quiet (``daemon/trim.py``), so
  after ``--settle`` this is near 0; they stay in the kernel's page cache, shared, clean
  once written back and dropped under memory pressure, not memory the daemon allocated;
* ``data_mdb_kib_per_open_run``: how much ``data.mdb`` grew per open run: what the runs
  cost in page cache and on disk (``docs/bench.md``, "open-runs", says where it goes);
* ``rss_kib_per_open_run``: anon and file (``VmRSS``), what ``ps`` shows;
* after completion and after each later round: the same three as totals against the
  idle daemon (MiB).

Usage::

    python -m bench open-runs [--runs 2000] [--rounds 1] [--settle 12] [--json FILE]
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


def _mib(reading: dict[str, int]) -> dict[str, float]:
    return {f: round(reading[f] / 1024, 1) for f in FIELDS}


def _over(reading: dict[str, int], base: dict[str, int]) -> dict[str, float]:
    return {f: round((reading[f] - base[f]) / 1024, 1) for f in FIELDS}


def run(runs: int, settle_s: float = 12.0, rounds: int = 1) -> dict[str, Any]:
    """Start, measure, complete and measure ``runs`` runs (``rounds`` times) on a fresh
    daemon."""
    with tempfile.TemporaryDirectory(prefix="bench-open-runs-") as tmp:
        env = clean_env(PALYRA_ADMIN_TOKEN=TOKEN)
        data = Path(tmp) / "data"
        mdb = data / "journal" / "data.mdb"
        with DaemonProcess(data, env=env) as daemon, httpx.Client(
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

            started = _settled(pid, settle_s)
            for run_id in [start(i, "warm") for i in range(50)]:
                complete(run_id)
            idle = _settled(pid, settle_s)
            mdb_idle = mdb.stat().st_size
            began = time.perf_counter()
            ids = [start(i, "open") for i in range(runs)]
            start_s = time.perf_counter() - began
            opened = _settled(pid, settle_s)
            mdb_opened = mdb.stat().st_size
            for run_id in ids:
                complete(run_id)
            done = _settled(pid, settle_s)
            later = []
            for r in range(2, rounds + 1):
                ids = [start(i, f"open{r}-") for i in range(runs)]
                for run_id in ids:
                    complete(run_id)
                later.append(_over(_settled(pid, settle_s), idle))
        data_mdb = mdb.stat().st_size
    per_run = {f: round((opened[f] - idle[f]) * 1024 / runs / 1000, 1) for f in FIELDS}
    return {
        "runs": runs, "start_ms_per_run": round(start_s * 1000 / runs, 2),
        "settle_s": settle_s,
        "started_mib": _mib(started),
        "idle_mib": _mib(idle),
        "anon_kib_per_open_run": per_run["RssAnon"], "file_kib_per_open_run": per_run["RssFile"],
        "rss_kib_per_open_run": per_run["VmRSS"],
        "data_mdb_kib_per_open_run": round((mdb_opened - mdb_idle) / runs / 1024, 1),
        "after_completion_over_idle_mib": _over(done, idle),
        "after_later_rounds_over_idle_mib": later,
        "data_mdb_mib": round(data_mdb / 2**20, 1),
        "file_pages": "LMDB's mapped data.mdb: the kernel's page cache, reclaimable, "
                      "not allocated by the daemon, unmapped by its idle trim",
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench open-runs")
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds of open-then-complete (later ones show reuse)")
    parser.add_argument("--settle", type=float, default=12.0,
                        help="seconds of quiet before each reading")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    result = run(args.runs, settle_s=args.settle, rounds=args.rounds)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
