"""Workload tool-loop v1 (/work/shared/workloads/tool-loop.md), driven through the app API.

``python -m bench.tool_loop --steps K --sessions N --concurrency C [--hitl] [--turns T]
[--db DIR] [--tool add|echo]`` prints one JSON line.

The harness talks to palyra only through a :class:`Driver` (start a turn,
wait for it while observing its tape events, decide an approval). The
in-process driver here calls ``PalyraApp`` directly; a gRPC or HTTP driver
plugs in behind the same three calls (``--transport``), with daemon-side
figures (RSS, CPU, commits) supplied by :meth:`Driver.server_stats`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

_T0 = time.perf_counter()
from palyra_gen.palyra import v1 as pb  # noqa: E402

from palyra.adapters import GatePolicy, RegistryTools  # noqa: E402
from palyra.app import CallContext, PalyraApp  # noqa: E402
from palyra.engine import Engine, EngineConfig  # noqa: E402
from palyra.journal import JournalStore  # noqa: E402
from palyra.policy import PolicyConfig, PolicyGate  # noqa: E402
from palyra.providers import ScriptedProvider  # noqa: E402
from palyra.tools import default_registry  # noqa: E402

IMPORT_S = time.perf_counter() - _T0
DEVICE = "01J00000000000000000000000"
CLIENT = CallContext.for_principal("user:bench", DEVICE)
APPROVER = CallContext.for_principal("admin:bench", DEVICE)

OnEvent = Callable[[pb.TapeEvent], Awaitable[None]]


def user_message(k: int, tool: str) -> str:
    """The workload's user message (K is read back by the scripted model)."""
    return (f"Start from 0 and add 1 to the running total {k} times, one `{tool}` tool call "
            "per step, then reply with the final result.")


class Driver(Protocol):
    """How the harness reaches palyra: in process, over gRPC or over HTTP."""

    async def prepare_session(self, session_key: str, *, hitl: bool) -> None:
        """Create the session; with ``hitl`` make ``add``/``echo`` ask each time."""
        ...

    async def start_turn(self, session_key: str, text: str) -> str:
        """Start a run with one user message (done when the loop ends); return its id."""
        ...

    async def wait(self, run_id: str, on_event: OnEvent) -> pb.Run:
        """Deliver the run's tape events in order until it ends; return the final run."""
        ...

    async def decide_approval(self, approval_id: str) -> None:
        """Approve once, as a different principal than the run's."""
        ...

    def server_stats(self) -> dict[str, Any]:
        """Daemon-side counters: commits, records and bytes appended, storage settings."""
        ...


class InProcessDriver:
    """Drives a ``PalyraApp`` in this process (no transport)."""

    def __init__(self, app: PalyraApp, store: JournalStore, tool: str) -> None:
        self._app = app
        self._store = store
        self._tool = tool

    async def prepare_session(self, session_key: str, *, hitl: bool) -> None:
        resolved = await self._app.resolve_session(
            CLIENT, pb.ResolveSessionRequest(session_key=session_key))
        if hitl:
            await self._app.set_tool_posture(CLIENT, pb.SetToolPostureRequest(
                session_id=resolved.session.session_id, tool_name=self._tool,
                posture=pb.ToolPosture.ASK_EACH_TIME))

    async def start_turn(self, session_key: str, text: str) -> str:
        created = await self._app.create_run(CLIENT, pb.CreateRunRequest(
            v=1, session_key=session_key, input=pb.MessageInput(text=text), complete=True))
        return created.run.run_id

    async def wait(self, run_id: str, on_event: OnEvent) -> pb.Run:
        async for response in self._app.watch_run(
                CLIENT, pb.WatchRunRequest(run_id=run_id, after_seq=-1)):
            await on_event(response.event)
        return (await self._app.get_run(CLIENT, pb.GetRunRequest(run_id=run_id))).run

    async def decide_approval(self, approval_id: str) -> None:
        await self._app.decide_approval(APPROVER, pb.DecideApprovalRequest(
            approval_id=approval_id, decision=pb.ApprovalDecision.APPROVE,
            scope=pb.ApprovalScope.ONCE, reason="bench"))

    def server_stats(self) -> dict[str, Any]:
        stats = self._store.stats()
        flags = self._store.env.env.flags()
        return {
            "commits": stats.commits, "events": stats.appended_events,
            "bytes": stats.appended_bytes, "append_calls": stats.append_calls,
            "max_batch_calls": stats.max_batch_calls,
            "storage_effective": {"engine": "lmdb", "sync": bool(flags.get("sync")),
                                  "metasync": bool(flags.get("metasync")),
                                  "map_size": stats.map_size, "group_commit": True},
        }


@contextlib.asynccontextmanager
async def in_process(data_dir: Path, args: argparse.Namespace) -> AsyncIterator[InProcessDriver]:
    """Open the whole engine graph on ``data_dir`` and yield a driver for it."""
    store = JournalStore.open(data_dir)
    try:
        registry = default_registry()
        config = EngineConfig(max_turns=args.steps + 2, approval_timeout_s=300.0)
        engine = Engine(store, ScriptedProvider(tool=args.tool),
                        GatePolicy(PolicyGate.load(PolicyConfig()), registry),
                        RegistryTools(registry, data_dir), config)
        async with engine:
            await engine.recover()
            yield InProcessDriver(PalyraApp(engine), store, args.tool)
    finally:
        store.close()


@dataclass
class Tally:
    """Client-side measurements of the measured phase."""

    steps: list[float] = field(default_factory=list)
    by_index: dict[int, list[float]] = field(default_factory=dict)
    turns: list[float] = field(default_factory=list)
    finals: list[float] = field(default_factory=list)
    runs: int = 0
    approvals: int = 0
    failures: list[str] = field(default_factory=list)


async def one_turn(driver: Driver, session_key: str, k: int, tool: str, tally: Tally) -> None:
    """Drive one turn; record step, final-answer and turn latencies; check ``result=K``."""
    started = time.perf_counter()
    last = started
    results = 0
    run_id = await driver.start_turn(session_key, user_message(k, tool))
    tally.runs += 1

    async def on_event(event: pb.TapeEvent) -> None:
        nonlocal last, results
        if event.tool_approval_request is not None:
            await driver.decide_approval(event.tool_approval_request.approval_id)
            tally.approvals += 1
        elif event.tool_result is not None:
            now = time.perf_counter()
            tally.steps.append(now - last)
            tally.by_index.setdefault(results, []).append(now - last)
            last = now
            results += 1 if event.tool_result.success else 0

    run = await driver.wait(run_id, on_event)
    ended = time.perf_counter()
    tally.turns.append(ended - started)
    tally.finals.append(ended - last)
    if run.state != pb.RunState.DONE or run.final_text != f"result={k}" or results != k:
        tally.failures.append(f"{run_id}: {run.state.name} {run.final_text!r} steps={results}")


async def drive(driver: Driver, args: argparse.Namespace, n: int, prefix: str) -> Tally:
    """N sessions x T turns through C closed-loop workers."""
    tally = Tally()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)

    async def worker() -> None:
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            key = f"{prefix}-{i}"
            await driver.prepare_session(key, hitl=args.hitl)
            for _ in range(args.turns):
                await one_turn(driver, key, args.steps, args.tool, tally)

    async with asyncio.TaskGroup() as tg:
        for _ in range(args.concurrency):
            tg.create_task(worker())
    return tally


def _pct(values: list[float], q: float) -> float:
    # Nearest-rank percentile, in ms.
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return round(ordered[int(rank) - 1] * 1000, 3)


def _dist(values: list[float]) -> dict[str, float]:
    return {"p50": _pct(values, 50), "p90": _pct(values, 90), "p99": _pct(values, 99),
            "max": round(max(values, default=0) * 1000, 3),
            "mean": round(statistics.fmean(values) * 1000, 3) if values else 0.0}


def _proc_status(key: str) -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def _proc_io() -> dict[str, int]:
    out: dict[str, int] = {}
    with contextlib.suppress(OSError), open("/proc/self/io") as handle:
        for line in handle:
            name, _, value = line.partition(":")
            out[name.strip()] = int(value)
    return out


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def physical_limits(directory: Path) -> dict[str, float]:
    """fsync latency on the data disk and the SHA-256 rate, for comparison (rule 6)."""
    probe = directory / ".fsync-probe"
    samples = []
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for _ in range(200):
            os.write(fd, b"x" * 128)
            t = time.perf_counter()
            os.fsync(fd)
            samples.append(time.perf_counter() - t)
    finally:
        os.close(fd)
        probe.unlink(missing_ok=True)
    block = os.urandom(1 << 20)
    t = time.perf_counter()
    for _ in range(64):
        hashlib.sha256(block).digest()
    sha_s = time.perf_counter() - t
    return {"fsync_p50_us": round(statistics.median(samples) * 1e6, 1),
            "sha256_mib_s": round(64 / sha_s, 1)}


def _db_sizes(data_dir: Path) -> dict[str, int]:
    main = sum(p.stat().st_blocks * 512 for p in data_dir.rglob("*.mdb") if p.is_file())
    total = sum(p.stat().st_blocks * 512 for p in data_dir.rglob("*") if p.is_file())
    return {"db_main_bytes": main, "db_wal_bytes": 0, "db_size_bytes": total}


async def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    """Warm up on a throwaway dir, then measure on ``--db``."""
    with tempfile.TemporaryDirectory(prefix="palyra-warmup-") as warm:
        async with in_process(Path(warm), args) as driver:
            await drive(driver, args, 3, "warmup")
    data_dir = Path(args.db) if args.db else Path(tempfile.mkdtemp(prefix="palyra-bench-"))
    if data_dir.exists() and any(data_dir.iterdir()):
        data_dir = data_dir / f"run-{time.time_ns()}"
    data_dir.mkdir(parents=True, exist_ok=True)
    limits = physical_limits(data_dir)
    async with in_process(data_dir, args) as driver:
        rss_before = _proc_status("VmRSS")
        before = driver.server_stats()
        io_before, cpu_before = _proc_io(), _cpu_s()
        t = time.perf_counter()
        tally = await drive(driver, args, args.sessions, "s")
        wall = time.perf_counter() - t
        cpu = _cpu_s() - cpu_before
        io_after, after = _proc_io(), driver.server_stats()
        sizes = _db_sizes(data_dir)
    steps = args.sessions * args.turns * args.steps
    commits = after["commits"] - before["commits"]
    rows = after["events"] - before["events"]
    written = after["bytes"] - before["bytes"]
    wchar = io_after.get("wchar", 0) - io_before.get("wchar", 0)
    result: dict[str, Any] = {
        "system": "palyra", "workload": "tool-loop", "workload_version": 1,
        "transport": "inproc", "steps": args.steps, "sessions": args.sessions,
        "concurrency": args.concurrency, "turns": args.turns, "hitl": args.hitl,
        "tool": args.tool,
        "turns_per_s": round(len(tally.turns) / wall, 3),
        "steps_per_s": round(steps / wall, 3),
        "wall_s": round(wall, 3),
        "step_latency_ms": _dist(tally.steps),
        "p50_step_ms": _pct(tally.steps, 50), "p99_step_ms": _pct(tally.steps, 99),
        "step_p50_ms_by_index": [_pct(tally.by_index.get(i, []), 50)
                                 for i in range(args.steps)],
        "turn_latency_ms": _dist(tally.turns),
        "final_answer_latency_ms": _dist(tally.finals),
        "checkpointer_calls": {"total": commits,
                               "per_step": round(commits / steps, 3) if steps else 0},
        "checkpoint_rows": rows, "writes_rows": 0, "rows_written": rows,
        "checkpoint_blob_bytes": written, "checkpoint_metadata_bytes": 0,
        "writes_blob_bytes": 0, "bytes_written": written,
        "rows_per_step": round(rows / steps, 3) if steps else 0,
        "bytes_per_step": round(written / steps, 1) if steps else 0,
        "proc_io": {"wchar": wchar, "write_bytes": io_after.get("write_bytes", 0)
                    - io_before.get("write_bytes", 0)},
        "wchar_per_step": round(wchar / steps, 1) if steps else 0,
        **sizes,
        "peak_rss_mib": round(_proc_status("VmHWM"), 1),
        "rss_before_run_mib": round(rss_before, 1),
        "cpu_s": round(cpu, 3), "cpu_util": round(cpu / wall, 3),
        "cpu_ms_per_step": round(cpu * 1000 / steps, 3) if steps else 0,
        "storage_effective": after["storage_effective"],
        "max_batch_calls": after["max_batch_calls"],
        "physical_limits": limits,
        "runs": tally.runs, "approvals": tally.approvals,
        "import_s": round(IMPORT_S, 3), "db_dir": str(data_dir),
        "ok": not tally.failures and len(tally.turns) == args.sessions * args.turns,
    }
    if tally.failures:
        result["failures"] = tally.failures[:5]
    if not args.keep_db and not args.db:
        shutil.rmtree(data_dir, ignore_errors=True)
    return result


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.tool_loop", description=__doc__)
    parser.add_argument("--steps", type=int, default=10, help="K tool calls per turn")
    parser.add_argument("--sessions", type=int, default=200, help="N sessions")
    parser.add_argument("--concurrency", type=int, default=1, help="C closed-loop workers")
    parser.add_argument("--turns", type=int, default=1, help="T user turns per session")
    parser.add_argument("--hitl", action="store_true", help="every tool call needs approval")
    parser.add_argument("--db", default="", help="data dir (fresh); default a temp dir")
    parser.add_argument("--tool", choices=("add", "echo"), default="add")
    parser.add_argument("--transport", choices=("inproc", "grpc", "http"), default="inproc",
                        help="inproc, or a daemon subprocess over grpc|http (bench.transports)")
    parser.add_argument("--keep-db", action="store_true", help="keep the temp data dir")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point; prints one JSON line, exit 0 iff every turn answered result=K."""
    argv = sys.argv[1:] if argv is None else argv
    peek = argparse.ArgumentParser(add_help=False)
    peek.add_argument("--transport", default="inproc")
    if peek.parse_known_args(argv)[0].transport in ("grpc", "http"):
        # Over a transport the harness drives a daemon subprocess; bench.transports
        # owns that (and --compare-inproc for the overhead ratio).
        from bench import transports

        return transports.main(argv)
    args = parse_args(argv)
    result = asyncio.run(run_bench(args))
    print(json.dumps(result, sort_keys=False))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
