"""``python -m bench daemons``: the tool-loop over gRPC against 1 and 3 daemons sharing one
PostgreSQL journal, beside one daemon on LMDB, in one sitting.

Usage::

    python -m bench daemons [-n N] [-k K] [-c C] [--daemons 1,3] [-r R] [--hitl] [--json FILE]

Each repeat runs, in turn: one ``palyra serve`` on LMDB; then, for each D of
``--daemons``, D daemons on one fresh database of a PostgreSQL server started for the
bench (``fsync`` on). The C closed-loop workers spread their sessions over the daemons
(session i on daemon i mod D, which takes the session's lease on its first turn), each
daemon reached over gRPC as ``palyra chat`` reaches it (``bench/transports.py``). Every
daemon warms up on sessions of its own first.

Per run: steps/s; step latency p50/p99; the daemons' journal commits per step (summed,
counted inside each daemon); CPU ms per step of the daemons (summed, measured inside
each) and of the PostgreSQL cluster (every process of the server); the database's
committed transactions per step (the watchers' and readers' included).

On a 2-core machine D daemons and the server share two cores: more daemons cannot show
more throughput here. What this shows is each daemon's and the server's cost per step,
from which docs/journal/postgres.md ("Expected scaling") estimates larger machines.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from palyra_gen.palyra import v1 as pb

from bench import probe, report
from bench.pgcpu import cluster_cpu_s, committed_transactions
from bench.transports import DaemonDriver, open_driver
from bench.workload import Driver, OnEvent, add_shape_arguments, drive, pct
from palyra.testing.postgres import PostgresServer


class FanOut:
    """The harness's :class:`~bench.workload.Driver` over several daemons: a session is
    always driven through one daemon (session ``<prefix>-i`` through daemon i mod D), and
    so is every call about its runs and approvals."""

    def __init__(self, drivers: list[Driver]) -> None:
        self._drivers = drivers
        self._of_run: dict[str, Driver] = {}
        self._of_approval: dict[str, Driver] = {}

    def driver_of(self, session_key: str) -> Driver:
        """The daemon's driver that serves ``session_key``."""
        index = int(session_key.rpartition("-")[2])
        return self._drivers[index % len(self._drivers)]

    async def prepare_session(self, session_key: str, *, hitl: bool) -> None:
        await self.driver_of(session_key).prepare_session(session_key, hitl=hitl)

    async def start_turn(self, session_key: str, text: str) -> str:
        driver = self.driver_of(session_key)
        run_id = await driver.start_turn(session_key, text)
        self._of_run[run_id] = driver
        return run_id

    async def wait(self, run_id: str, on_event: OnEvent) -> pb.Run:
        driver = self._of_run.pop(run_id)

        async def each(event: pb.TapeEvent) -> None:
            if event.tool_approval_request is not None:
                self._of_approval[event.tool_approval_request.approval_id] = driver
            await on_event(event)

        return await driver.wait(run_id, each)

    async def decide_approval(self, approval_id: str) -> None:
        await self._of_approval.pop(approval_id).decide_approval(approval_id)


def _kinds(args: argparse.Namespace) -> list[tuple[str, str, int]]:
    """``(name, backend, daemons)`` of each run of a repeat, in the order they run."""
    return [("lmdb x1", "lmdb", 1)] + [(f"postgres x{d}", "postgres", d) for d in args.daemons]


async def _one_run(args: argparse.Namespace, root: Path, backend: str, count: int,
                   server: PostgresServer | None) -> dict[str, Any]:
    """``count`` fresh daemons on ``backend``, warmed, then N sessions through all of them."""
    journal: dict[str, str] = {}
    dsn = ""
    if backend == "postgres":
        assert server is not None
        dsn = server.create_database()
        journal = {"PALYRA_JOURNAL_BACKEND": "postgres", "PALYRA_JOURNAL_DSN": dsn}
    async with contextlib.AsyncExitStack() as stack:
        daemons: list[DaemonDriver] = []
        for i in range(count):  # one at a time: the first one migrates the schema
            data_dir = root / f"{backend}-{count}-{i}-{time.time_ns()}"
            daemons.append(await stack.enter_async_context(
                open_driver("grpc", data_dir, args, journal)))
        fan_out = FanOut([d.client for d in daemons])
        await drive(fan_out, args, 3 * count, "warmup")
        before = [d.snapshot() for d in daemons]
        server_cpu = cluster_cpu_s(server.pid if server is not None else None)
        xacts = committed_transactions(dsn) if dsn else 0
        start = time.perf_counter()
        tally = await drive(fan_out, args, args.sessions, "s")
        wall = time.perf_counter() - start
        windows = [probe.delta(b, d.snapshot()) for b, d in zip(before, daemons, strict=True)]
        server_cpu = cluster_cpu_s(server.pid if server is not None else None) - server_cpu
        xacts = (committed_transactions(dsn) - xacts) if dsn else 0
    steps = args.sessions * args.turns * args.steps
    result: dict[str, Any] = {
        "backend": backend, "daemons": count,
        "steps_per_s": round(steps / wall, 1),
        "p50_step_ms": pct(tally.steps, 50), "p99_step_ms": pct(tally.steps, 99),
        "commits_per_step": round(sum(w["journal"].get("commits", 0) for w in windows) / steps,
                                  3),
        "daemon_cpu_ms_per_step": round(sum(w["cpu_s"] for w in windows) * 1000 / steps, 3),
        "daemon_cpu_ms_per_step_each": [round(w["cpu_s"] * 1000 / steps, 3) for w in windows],
        "daemon_cpu_ms_per_step_by_thread": _by_thread(windows, steps),
        "commits_each": [w["journal"].get("commits", 0) for w in windows],
        "ok": not tally.failures and len(tally.turns) == args.sessions * args.turns,
        **({"failures": tally.failures[:5]} if tally.failures else {}),
    }
    if server is not None:
        result["postgres_cpu_ms_per_step"] = round(server_cpu * 1000 / steps, 3)
        result["pg_transactions_per_step"] = round(xacts / steps, 3)
    return result


def _by_thread(windows: list[dict[str, Any]], steps: int) -> dict[str, float]:
    """CPU ms per step of each thread name, summed over the daemons (the busiest first)."""
    total: dict[str, float] = {}
    for window in windows:
        for key, seconds in window["threads"].items():
            name = key.partition(":")[2] or key
            total[name] = total.get(name, 0.0) + seconds
    ranked = sorted(total.items(), key=lambda kv: -kv[1])
    return {name: round(seconds * 1000 / steps, 3) for name, seconds in ranked if seconds > 0}


_ROWS = (("steps/s", "steps_per_s"), ("step p50 ms", "p50_step_ms"),
         ("step p99 ms", "p99_step_ms"), ("journal commits/step", "commits_per_step"),
         ("daemons' CPU ms/step", "daemon_cpu_ms_per_step"),
         ("PostgreSQL CPU ms/step", "postgres_cpu_ms_per_step"),
         ("PostgreSQL transactions/step", "pg_transactions_per_step"))


def render(document: dict[str, Any]) -> str:
    """One column per kind of run, medians of the repeats (each run's value after ``|``)."""
    results, args = document["results"], document["args"]
    names = list(results)
    head = (f"palyra tool-loop over gRPC · N={args['sessions']} K={args['steps']} "
            f"C={args['concurrency']}{' · HITL' if args['hitl'] else ''} · medians of "
            f"{args['repeats']} · tree {document['tree']['commit'][:10]}")
    lines = [head, f"{'figure':32}" + "".join(f"{name:>16}" for name in names)]
    for label, key in _ROWS:
        cells = []
        for name in names:
            values = [run[key] for run in results[name]["runs"] if key in run]
            cells.append(f"{statistics.median(values):>16.3f}" if values else f"{'—':>16}")
        lines.append(f"{label:32}" + "".join(cells))
    for name in names:
        each = [run["daemon_cpu_ms_per_step_each"] for run in results[name]["runs"]]
        lines.append(f"  {name}: CPU ms/step of each daemon, per run: {each}")
        threads = results[name]["runs"][-1]["daemon_cpu_ms_per_step_by_thread"]
        lines.append(f"  {name}: CPU ms/step by thread (all daemons, last run): {threads}")
    return "\n".join(lines)


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    """Every repeat, the kinds in turn; the JSON document."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in _kinds(args)}
    with tempfile.TemporaryDirectory(prefix="palyra-bench-daemons-") as tmp, \
            PostgresServer(durable=True) as server:
        for i in range(args.repeats):
            for name, backend, count in _kinds(args):
                result = asyncio.run(_one_run(args, Path(tmp), backend, count,
                                              server if backend == "postgres" else None))
                runs[name].append(result)
                print(f"run {i + 1}/{args.repeats} {name}: {result['steps_per_s']} steps/s, "
                      f"p50/p99 {result['p50_step_ms']}/{result['p99_step_ms']} ms, daemons "
                      f"{result['daemon_cpu_ms_per_step']} CPU ms/step, ok={result['ok']}",
                      file=sys.stderr, flush=True)
    return {"bench": "daemons", "tree": report.tree_info(), "host": report.host_info(),
            "args": vars(args), "results": {name: {"runs": rs} for name, rs in runs.items()}}


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench daemons", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_arguments(parser, concurrency=16)
    parser.add_argument("-r", "--repeats", type=int, default=3, help="repeats; medians shown")
    parser.add_argument("--daemons", default="1,3",
                        help="daemon counts on PostgreSQL, comma-separated (default 1,3)")
    parser.add_argument("--hitl", action="store_true", help="every tool call needs approval")
    parser.add_argument("--json", default="", metavar="FILE", help="also write the runs as JSON")
    args = parser.parse_args(argv)
    try:
        args.daemons = [int(d) for d in args.daemons.split(",")]
    except ValueError:
        parser.error("--daemons is a comma-separated list of counts, e.g. 1,3")
    if min(args.steps, args.sessions, args.concurrency, args.repeats, *args.daemons) < 1:
        parser.error("N, K, C, repeats and daemon counts must be at least 1")
    # What the shared drivers read from a tool-loop command line.
    args.turns, args.tool, args.unbatched, args.rpc = 1, "add", False, "stream"
    args.grpc_client, args.daemon_reflection = "grpclib", False
    return args


def main(argv: list[str]) -> int:
    """Entry point; exit 0 iff every turn of every run answered ``result=K``."""
    args = parse_args(argv)
    document = run_all(args)
    print(render(document))
    if args.json:
        report.write_json(args.json, document)
    return 0 if all(run["ok"] for rs in document["results"].values() for run in rs["runs"]) else 1
