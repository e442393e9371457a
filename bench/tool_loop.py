"""``python -m bench tool-loop``: workload tool-loop v1, repeated, with the figures issue 11 tracks.

Usage::

    python -m bench tool-loop [-n N] [-k K] [-c C] [--turns T] [--repeats R] [--hitl]
        [--transport inproc|grpc|http] [--compare-inproc] [--json FILE|-] [--db DIR]
        [--backend lmdb|postgres|both] [--langgraph] [--tool add|echo|mcp|skill]
        [--compare-tools] [--grpc-client grpclib|grpcio] [--http-client httpx|lean]

Each of the R runs (default 3) warms up on 3 sessions, then measures N
sessions of K tool steps through C closed-loop workers on a fresh data dir
(bench/measure.py), and the table shows the median and the spread. Beside
steps/s it prints CPU ms per step for the process and per thread (event
loop, journal, other), journal records, commits and LMDB transactions per
step, device flushes per step counted by kernel tracepoints, betterproto2
messages built per step, and the disk and hashing floors measured in the same
run. Over ``--transport grpc|http`` the measured process is the daemon
(its client's CPU is a separate row); ``--compare-inproc`` also runs in
process, alternating with the transport runs, and prints the ratios.
``--json FILE`` writes every run and the medians for a later diff.

``--backend postgres|both`` puts the journal on a real PostgreSQL server started
for the bench (``fsync`` on), alternating with LMDB when ``both``; ``--langgraph``
adds LangGraph's own PostgreSQL checkpointer on the same server, same workload,
alternating in the same sitting (``bench/langgraph_pg.py``, in a process of its
own; needs the ``bench`` extra). PostgreSQL's server CPU and committed
transactions per step are measured for each.

``--compare-tools`` runs the built-in ``add``, the same add served by a stdio
MCP server (``--tool mcp``) and the example WebAssembly skill's add (``--tool
skill``) in process, alternating within each repeat, and prints each one's CPU
per step against the built-in's (the MCP server's own process CPU beside it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

_T0 = time.perf_counter()
from bench import ops, ops_interleave, probe, report  # noqa: E402
from bench.inproc import in_process  # noqa: E402
from bench.measure import Subject, measure  # noqa: E402
from bench.pgcpu import cluster_cpu_s, committed_transactions  # noqa: E402
from bench.workload import add_shape_arguments, drive  # noqa: E402
from palyra.journal import JournalConfig  # noqa: E402

if TYPE_CHECKING:  # imported only for --backend postgres|both: psycopg would grow every
    from palyra.testing.postgres import PostgresServer  # LMDB run's heap (and its GC time)

IMPORT_S = time.perf_counter() - _T0
COMPARED_TOOLS = ("add", "mcp", "skill")  # --compare-tools; the first is the reference
SCHEMA = 2  # bump when a figure's meaning changes, so a diff knows


def db_sizes(data_dir: Path) -> dict[str, int]:
    """On-disk bytes of LMDB files and of the whole data dir right after the run."""
    main = sum(p.stat().st_blocks * 512 for p in data_dir.rglob("*.mdb") if p.is_file())
    total = sum(p.stat().st_blocks * 512 for p in data_dir.rglob("*") if p.is_file())
    return {"db_main_bytes": main, "db_wal_bytes": 0, "db_size_bytes": total}


def _fresh(root: Path, kind: str) -> Path:
    path = root / f"{kind}-{time.time_ns()}"
    path.mkdir(parents=True)
    return path


def _server_cpu_s(server: PostgresServer | None) -> float:
    """CPU seconds (user + system) used so far by every process of ``server``'s cluster."""
    return cluster_cpu_s(server.pid if server is not None else None)


def langgraph_run(args: argparse.Namespace, server: PostgresServer) -> dict[str, Any]:
    """LangGraph's PostgreSQL checkpointer on ``server``: warm-up and measured run each on a
    fresh database, in a process of its own (``bench/langgraph_pg.py``)."""
    dsn, warm = server.create_database(), server.create_database()
    done = subprocess.run(
        [sys.executable, "-m", "bench.langgraph_pg", "--dsn", dsn, "--warm-dsn", warm,
         "-n", str(args.sessions), "-k", str(args.steps), "-c", str(args.concurrency),
         "--server-pid", str(server.pid)],
        capture_output=True, text=True, check=False, timeout=3600)
    if not done.stdout.strip():
        raise RuntimeError(f"bench.langgraph_pg failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def inproc_run(args: argparse.Namespace, root: Path, ops_mode: str = "off",
                     server: PostgresServer | None = None) -> dict[str, Any]:
    """One in-process run: warm up on a throwaway dir, then measure on a fresh one
    (with ``ops_mode``'s metrics or tracing on around the measured phase); with
    ``server``, the journal of each is a fresh database on it."""
    args.journal_config = None
    if server is not None:
        args.journal_config = JournalConfig(backend="postgres", dsn=server.create_database())
    with tempfile.TemporaryDirectory(prefix="palyra-warmup-") as warm:
        async with in_process(Path(warm), args) as driver, ops.operations(driver, ops_mode):
            await drive(driver, args, 3, "warmup")
    data_dir = _fresh(root, "inproc")
    if server is not None:  # the measured run on a fresh database of its own
        args.journal_config = JournalConfig(backend="postgres", dsn=server.create_database())
    async with in_process(data_dir, args) as driver:
        probe.register_store(driver.store)
        subject = Subject(os.getpid(), probe.snapshot, driver.storage_effective())
        probe.COUNTER.install()
        server_cpu = _server_cpu_s(server)
        dsn = args.journal_config.dsn if server is not None else ""
        xacts = committed_transactions(dsn) if dsn else 0
        try:
            async with ops.operations(driver, ops_mode) as counters:
                result = await measure(driver, subject, args, data_dir, "inproc")
        finally:
            probe.COUNTER.uninstall()
        result.update(db_sizes(data_dir))
        if server is not None:
            steps = result["steps_per_s"] * result["wall_s"]
            result["postgres_cpu_ms_per_step"] = round(
                (_server_cpu_s(server) - server_cpu) * 1000 / max(steps, 1), 3)
            result["pg_transactions_per_step"] = round(
                (committed_transactions(dsn) - xacts) / max(steps, 1), 2)
        result["ops"] = {"mode": ops_mode, **counters}
    return result


async def transport_run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """One run against a fresh daemon, warmed in place (a throwaway daemon would leave it cold)."""
    from bench.transports import open_driver

    data_dir = root / f"{args.transport}-{time.time_ns()}"
    async with open_driver(args.transport, data_dir, args) as daemon:
        idle = _rss_mib(daemon.pid)
        await drive(daemon.client, args, 3, "warmup")
        warm = _rss_mib(daemon.pid)
        subject = Subject(daemon.pid, daemon.snapshot, daemon.storage_effective())
        result = await measure(daemon.client, subject, args, data_dir, args.transport)
        result.update(db_sizes(data_dir))
        result["daemon_settings"] = daemon.settings()
        result["idle_rss_mib"], result["warm_rss_mib"] = idle, warm
    return result


def _rss_mib(pid: int) -> float:
    """``VmRSS`` of ``pid`` in MiB (the resident memory ``ps`` shows)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _progress(kind: str, i: int, args: argparse.Namespace, result: dict[str, Any]) -> None:
    print(f"run {i + 1}/{args.repeats} {kind}: {result['steps_per_s']:.1f} steps/s, "
          f"{result['cpu_ms_per_step']:.3f} CPU ms/step, "
          f"{result.get('commits_per_step', 0):.3f} commits/step, p50/p99 "
          f"{result['p50_step_ms']}/{result['p99_step_ms']} ms"
          + (f", PostgreSQL {result['postgres_cpu_ms_per_step']:.3f} CPU ms/step"
             if "postgres_cpu_ms_per_step" in result else "")
          + f", ok={result['ok']}",
          file=sys.stderr, flush=True)


def _one_run(args: argparse.Namespace, root: Path, kind: str,
             server: PostgresServer | None) -> dict[str, Any]:
    """One measured run of ``kind`` (but LangGraph's)."""
    if kind.startswith("tool:"):  # --compare-tools
        tool_args = argparse.Namespace(**{**vars(args), "tool": kind.removeprefix("tool:")})
        return asyncio.run(inproc_run(tool_args, root))
    if kind == "inproc-postgres":
        return asyncio.run(inproc_run(args, root, "off", server))
    if kind.startswith("inproc"):
        mode = kind.partition("+")[2] or (args.ops if args.ops != "compare" else "off")
        return asyncio.run(inproc_run(args, root, mode))
    return asyncio.run(transport_run(args, root))


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    """Every repeat (transport and in-process runs alternating); the JSON document."""
    root = Path(args.db) if args.db else Path(tempfile.mkdtemp(prefix="palyra-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    kinds = ([args.transport] if args.transport != "inproc" else []) + (
        ["inproc"] if args.transport == "inproc" or args.compare_inproc else [])
    if args.backend != "lmdb":  # in process, alternating with LMDB when "both"
        kinds = (["inproc"] if args.backend == "both" else []) + ["inproc-postgres"] + (
            ["langgraph-postgres"] if args.langgraph else [])
    server: PostgresServer | None = None
    if args.backend != "lmdb":
        from palyra.testing.postgres import PostgresServer

        server = PostgresServer(durable=True).start()
    if args.ops == "interleave":  # metrics on and off in blocks of one run, per repeat
        return interleave_all(args)
    if args.ops == "compare":  # in process, the three modes alternating within each repeat
        kinds = [f"inproc+{mode}" if mode != "off" else "inproc" for mode in ops.MODES]
    if args.compare_tools:  # in process, the three tools alternating within each repeat
        kinds = [f"tool:{tool}" for tool in COMPARED_TOOLS]
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
    try:
        for i in range(args.repeats):
            for kind in kinds:
                if kind == "langgraph-postgres":
                    assert server is not None
                    result = langgraph_run(args, server)
                else:
                    result = _one_run(args, root, kind, server)
                runs[kind].append(result)
                _progress(kind, i, args, result)
    finally:
        if server is not None:
            server.stop()
        if not args.keep_db and not args.db:
            shutil.rmtree(root, ignore_errors=True)
    document: dict[str, Any] = {
        "bench": "tool-loop", "schema": SCHEMA, "tree": report.tree_info(),
        "host": report.host_info(), "import_s": round(IMPORT_S, 3),
        "args": {k: v for k, v in vars(args).items() if k not in ("json", "journal_config")},
        "results": {kind: {"median": report.median_tree(rs), "runs": rs}
                    for kind, rs in runs.items()},
    }
    if args.ops == "compare":
        document["ops_overhead"] = report.ops_overhead(document["results"])
    if args.compare_tools:
        document["tool_ratios"] = report.tool_ratios(document["results"])
    if args.transport != "inproc" and args.compare_inproc:
        document["comparison"] = report.comparison(
            document["results"][args.transport]["median"], document["results"]["inproc"]["median"])
    return document


def interleave_all(args: argparse.Namespace) -> dict[str, Any]:
    """``--ops interleave``: per repeat, one daemon with metrics switched on and off in its
    blocks, then one with tracing."""
    runs = []
    for i in range(args.repeats):
        for mode in ("metrics", "tracing"):
            result = asyncio.run(ops_interleave.interleaved_run(args, mode, args.blocks))
            print(f"run {i + 1}/{args.repeats} {ops_interleave.text(result)}", file=sys.stderr,
                  flush=True)
            runs.append(result)
    return {"bench": "tool-loop", "schema": SCHEMA, "tree": report.tree_info(),
            "host": report.host_info(), "import_s": round(IMPORT_S, 3),
            "args": {k: v for k, v in vars(args).items() if k not in ("json", "journal_config")},
            "interleaved": runs}


def render(document: dict[str, Any]) -> str:
    """The human-readable tables (and the ratio block) of a document."""
    args, tree = document["args"], document["tree"]
    out = []
    if "interleaved" in document:
        return "\n".join(ops_interleave.text(run) for run in document["interleaved"])
    for kind, result in document["results"].items():
        system = "LangGraph" if kind.startswith("langgraph") else "palyra"
        title = (f"{system} tool-loop · {kind}{' · HITL' if args['hitl'] else ''} · "
                 f"N={args['sessions']} K={args['steps']} C={args['concurrency']} "
                 f"T={args['turns']} · medians of {len(result['runs'])} · "
                 f"tree {tree['commit'][:10]}{'+dirty' if tree['dirty'] else ''}")
        out.append(report.table(title, result["median"], result["runs"]))
    if "ops_overhead" in document:
        out.append(report.ops_overhead_text(document["ops_overhead"]))
    if "tool_ratios" in document:
        out.append(report.tool_ratios_text(document["tool_ratios"]))
    if "comparison" in document:
        out.append(report.comparison_text(
            args["transport"], document["results"][args["transport"]]["median"],
            document["results"]["inproc"]["median"], document["comparison"]))
    return "\n\n".join(out)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench tool-loop", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape_arguments(parser, concurrency=1)
    parser.add_argument("--turns", type=int, default=1, help="T user turns per session")
    parser.add_argument("-r", "--repeats", type=int, default=3, help="runs; the table shows medians")
    parser.add_argument("--hitl", action="store_true", help="every tool call needs approval")
    parser.add_argument("--db", default="", help="parent dir of the data dirs (kept); default temp")
    parser.add_argument("--tool", choices=("add", "echo", "mcp", "skill"), default="add",
                        help="mcp: the same add served by a stdio MCP server; skill: the "
                             "example WebAssembly skill's add (inproc only)")
    parser.add_argument("--compare-tools", action="store_true",
                        help="in process: add, mcp and skill alternating within each repeat, "
                             "with each one's CPU/step against the built-in add")
    parser.add_argument("--unbatched", action="store_true",
                        help="watch one event per message (as before WatchRunRequest.batch)")
    parser.add_argument("--transport", choices=("inproc", "grpc", "http"), default="inproc",
                        help="inproc, or a daemon subprocess over grpc|http")
    parser.add_argument("--rpc", choices=("stream", "create-watch-get"), default="stream",
                        help="a turn's calls: one RunStream (batch; as `palyra chat`), or "
                             "CreateRun + WatchRun (batch) + GetRun; the same in process")
    parser.add_argument("--http-client", choices=("httpx", "lean"), default="httpx",
                        help="with --transport http: httpx + httpx-sse (a Python client's "
                             "usual pick), or bench/lean_http.py (the same requests and "
                             "frames, no library): how much of the HTTP figures is the client")
    parser.add_argument("--grpc-client", choices=("grpclib", "grpcio"), default="grpclib",
                        help="with --transport grpc: grpclib (pure-Python h2, as `palyra "
                             "chat`), or grpcio's asyncio client (C-core; the same calls and "
                             "messages, bench/grpcio_driver.py): how much of the gRPC figures "
                             "is the client")
    parser.add_argument("--daemon-reflection", action="store_true",
                        help="with --transport: keep the daemon's post-run reflection on (its "
                             "default; off by default here, as in process)")
    parser.add_argument("--compare-inproc", action="store_true",
                        help="with --transport: also run in process and print the ratios")
    parser.add_argument("--ops", choices=("off", "metrics", "tracing", "compare", "interleave"),
                        default="off",
                        help="in process: metrics (scraped every 1 s) or tracing (100 %% "
                             "sampling) on; compare runs off/metrics/tracing alternating "
                             "and prints the overhead (bench/ops.py); interleave turns the "
                             "metrics, then tracing, on and off in blocks of N sessions "
                             "within one run each (bench/ops_interleave.py)")
    parser.add_argument("--blocks", type=int, default=24,
                        help="with --ops interleave: blocks per run (half of them on)")
    parser.add_argument("--json", default="", metavar="FILE",
                        help="also write every run and the medians as JSON (- for stdout)")
    parser.add_argument("--keep-db", action="store_true", help="keep the temp data dirs")
    parser.add_argument("--backend", choices=("lmdb", "postgres", "both"), default="lmdb",
                        help="the journal: LMDB, a real PostgreSQL server (fsync on, started "
                             "for the bench), or both alternating (inproc only)")
    parser.add_argument("--langgraph", action="store_true",
                        help="with --backend postgres|both: also LangGraph's own PostgreSQL "
                             "checkpointer on the same server, alternating")
    args = parser.parse_args(argv)
    if args.langgraph and args.backend == "lmdb":
        parser.error("--langgraph runs on PostgreSQL: add --backend postgres|both")
    if args.compare_tools and (args.transport != "inproc" or args.ops != "off"
                               or args.backend != "lmdb"):
        parser.error("--compare-tools runs in process on LMDB, without --ops")
    if args.ops != "off" and args.transport != "inproc":
        parser.error("--ops measures in process only (--transport inproc)")
    if min(args.steps, args.sessions, args.concurrency, args.turns, args.repeats) < 1:
        parser.error("N, K, C, T and repeats must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point; exit 0 iff every turn of every run answered ``result=K``."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    document = run_all(args)
    if args.json != "-":
        print(render(document))
    if args.json:
        report.write_json(args.json, document)
    if "interleaved" in document:  # a failed turn raised in its block
        return 0
    return 0 if all(r["median"]["ok"] for r in document["results"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
