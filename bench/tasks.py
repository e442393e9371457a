"""``python -m bench tasks``: the durable task queue, enqueue to start to done.

Usage::

    python -m bench tasks [--tasks N] [--producers 1,16] [--workers W] [--rounds R]
        [--json FILE] [--dir D]

For each producer count P, each of R rounds opens a fresh durable journal
(``sync=True``, as the daemon runs it), starts a :class:`TaskQueue` and the
daemon's own :class:`TaskWorker` with W loops over a handler that does nothing,
and has P closed-loop producers enqueue N tasks between them: a producer
enqueues its next task once its last one has started (its enqueue is durable
and a worker's claim of it is durable), so at most P tasks wait in the queue and
the start latency is the queue's own, not a backlog the producers built (with
``--no-wait-start`` a producer moves on at its enqueue's acknowledgement; then
producers outrun the workers and the latency measures the backlog). Every step
of a task is acknowledged only after its commit is durable: the enqueue, the
claim (the handler starts after it) and the success (counted once it returns).

Figures per round, medians over the rounds in the summary line:

* ``tasks_per_s``: N over the time from the first enqueue to the last success;
* ``start_ms`` p50/p99: enqueue call to handler start (one commit each way plus
  the wait in the queue);
* ``enqueue_ms`` p50/p99: enqueue call to its durable acknowledgement;
* ``cpu_us_per_task``: process CPU (every thread) per task over the window;
* ``loop_cpu_us_per_task``: the event loop's thread alone (the rest is the writer's);
* ``writer_busy``: the share of the window the writer thread spent inside commits (its
  flush, and waiting for the GIL in between: near 1, commits queue behind each other);
* ``writer_cpu``: the share of the window the writer thread was on a CPU (its own clock);
* ``flush_ms_mean``: one frame's ``O_DSYNC`` write as the writer timed it, which ends once
  the writer holds the GIL again; ``dsync_floor_ms`` is the same write with nothing else
  running (measured once, before the rounds);
* ``writer_gil_wait``: the share of the window the writer spent inside commits neither on
  a CPU nor in the disk's flush (``writer_busy - writer_cpu - commits x dsync_floor``, an
  estimate that counts its CPU outside commits as inside): what it waited for the GIL;
* ``commits_per_task``: the journal's durable commits (group-commit frames) per task.

A warm-up round of ``N/10`` tasks on a throwaway journal runs first; the bench
then freezes what it built (``gc.freeze()``), as the daemon does.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from palyra.journal import JournalStore
from palyra.journal._env import WRITER_THREAD
from palyra.tasks.model import TaskRecord
from palyra.tasks.queue import FollowUp, Ride, TaskQueue
from palyra.tasks.worker import TaskContext, TaskWorker

KIND = "bench"


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


class _Round:
    """One round's clocks: when each task was enqueued, started and finished."""

    def __init__(self, tasks: int) -> None:
        self.tasks = tasks
        self.enqueued_at: dict[int, float] = {}
        self.started: dict[int, asyncio.Future[None]] = {}
        self.start_ms: list[float] = []
        self.enqueue_ms: list[float] = []
        self.done = 0
        self.all_done = asyncio.get_running_loop().create_future()

    async def handler(self, ctx: TaskContext) -> dict[str, Any] | None:
        i = ctx.payload["i"]
        self.start_ms.append((time.perf_counter() - self.enqueued_at[i]) * 1e3)
        started = self.started.pop(i, None)
        if started is not None:
            started.set_result(None)
        return None

    def finished(self) -> None:
        self.done += 1
        if self.done == self.tasks and not self.all_done.done():
            self.all_done.set_result(None)


class _CountingQueue(TaskQueue):
    """The queue, telling the round when a success is durable (the worker's ack)."""

    round: _Round | None = None

    async def succeed_handing_on(self, task_id: str, epoch: int,
                                 result: dict[str, Any] | None = None,
                                 then: Sequence[FollowUp] = (), *, ride: Ride | None = None
                                 ) -> tuple[TaskRecord, list[TaskRecord]]:
        # The worker's path (``succeed`` goes through it too): counting ``succeed``
        # alone missed every success, and a round waited for them forever.
        answer = await super().succeed_handing_on(task_id, epoch, result, then, ride=ride)
        if self.round is not None:
            self.round.finished()
        return answer


async def run_round(data_dir: Path, producers: int, tasks: int, workers: int,
                    wait_start: bool = True, dsync_floor_s: float = 0.0) -> dict[str, Any]:
    """One round on a fresh journal; its figures."""
    store = JournalStore.open(data_dir)
    queue = _CountingQueue(store)
    await queue.start()
    rnd = _Round(tasks)
    queue.round = rnd
    worker = TaskWorker(queue, {KIND: rnd.handler}, concurrency=workers)
    worker.start()
    counter = iter(range(tasks))

    loop = asyncio.get_running_loop()

    async def produce() -> None:
        for i in counter:
            started = rnd.started[i] = loop.create_future()
            t0 = time.perf_counter()
            rnd.enqueued_at[i] = t0
            await queue.enqueue(KIND, payload={"i": i})
            rnd.enqueue_ms.append((time.perf_counter() - t0) * 1e3)
            if wait_start:
                await started

    commits0 = store.stats().commits
    busy0, flush0 = _commit_seconds(store), _flush_seconds(store)
    writer_clock = _writer_clock()
    cpu0, loop_cpu0 = time.process_time(), time.thread_time()
    writer_cpu0 = time.clock_gettime(writer_clock)
    t0 = time.perf_counter()
    try:
        await asyncio.gather(*(produce() for _ in range(producers)))
        await rnd.all_done
        seconds = time.perf_counter() - t0
        cpu, loop_cpu = time.process_time() - cpu0, time.thread_time() - loop_cpu0
        writer_cpu = time.clock_gettime(writer_clock) - writer_cpu0
        commits = store.stats().commits - commits0
        busy = _commit_seconds(store) - busy0
        flush_s, flush_n = (now - then for now, then in zip(_flush_seconds(store), flush0,
                                                            strict=True))
    finally:
        await worker.close()
        await queue.close()
        store.close()
    return {
        "producers": producers, "workers": workers, "tasks": tasks, "wait_start": wait_start,
        "seconds": round(seconds, 4),
        "tasks_per_s": round(tasks / seconds),
        "start_ms_p50": round(_quantile(rnd.start_ms, 0.5), 3),
        "start_ms_p99": round(_quantile(rnd.start_ms, 0.99), 3),
        "enqueue_ms_p50": round(_quantile(rnd.enqueue_ms, 0.5), 3),
        "enqueue_ms_p99": round(_quantile(rnd.enqueue_ms, 0.99), 3),
        "cpu_us_per_task": round(cpu / tasks * 1e6, 1),
        "loop_cpu_us_per_task": round(loop_cpu / tasks * 1e6, 1),
        "writer_busy": round(busy / seconds, 3),
        "writer_cpu": round(writer_cpu / seconds, 3),
        "flush_ms_mean": round(flush_s / max(1, flush_n) * 1e3, 3),
        "writer_gil_wait": round(max(0.0, busy - writer_cpu - commits * dsync_floor_s) / seconds,
                                 3),
        "commits_per_task": round(commits / tasks, 3),
    }


def _writer_clock() -> int:
    """The CPU clock of this process's journal writer thread (one store open)."""
    writer = next(t for t in threading.enumerate() if t.name == WRITER_THREAD)
    assert writer.ident is not None
    return time.pthread_getcpuclockid(writer.ident)


def _flush_seconds(store: JournalStore) -> tuple[float, float]:
    """Wall time of the commit log's frame writes so far, and how many."""
    _timings, writes = store.commit_timings()
    return (writes.sum, float(sum(writes.counts))) if writes is not None else (0.0, 0.0)


def dsync_floor(directory: Path, writes: int = 200) -> float:
    """Median seconds of one page-sized ``O_DSYNC`` write in ``directory``, nothing else
    running: the disk's part of a commit."""
    path = directory / "dsync-floor"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DSYNC, 0o600)
    try:
        page = bytes(4096)
        os.pwrite(fd, page, 0)
        took = []
        for _ in range(writes):
            began = time.perf_counter()
            os.pwrite(fd, page, 0)
            took.append(time.perf_counter() - began)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(took)


def _commit_seconds(store: JournalStore) -> float:
    """Wall time the writer thread has spent in commits so far (its histogram's sum)."""
    timings, _writes = store.commit_timings()
    return timings.commit_seconds.sum if timings is not None else 0.0


_MEDIANS = ("tasks_per_s", "start_ms_p50", "start_ms_p99", "enqueue_ms_p50", "enqueue_ms_p99",
            "cpu_us_per_task", "loop_cpu_us_per_task", "writer_busy", "writer_cpu",
            "flush_ms_mean", "writer_gil_wait", "commits_per_task")


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Warm up, then every producer count for every round; the lines printed."""
    root = Path(tempfile.mkdtemp(prefix="palyra-bench-tasks-", dir=args.dir))
    n = 0

    def fresh() -> Path:
        nonlocal n
        n += 1
        return root / f"round-{n}"

    try:
        return await _rounds(args, fresh)
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def _rounds(args: argparse.Namespace, fresh: Any) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    await run_round(fresh(), max(args.producers), max(100, args.tasks // 10), args.workers,
                    args.wait_start)
    gc.collect()
    gc.freeze()
    floor_dir = fresh()
    floor_dir.mkdir(parents=True)
    floor = dsync_floor(floor_dir)
    _emit(lines, {"line": "dsync_floor", "dsync_floor_ms": round(floor * 1e3, 3)})
    rounds: dict[int, list[dict[str, Any]]] = {p: [] for p in args.producers}
    for _ in range(args.rounds):
        for producers in args.producers:  # alternating, so load swings hit each alike
            line = await run_round(fresh(), producers, args.tasks, args.workers,
                                   args.wait_start, floor)
            line["load1"] = os.getloadavg()[0]
            rounds[producers].append(line)
            _emit(lines, {"line": "round", **line})
    for producers, runs in rounds.items():
        summary = {"line": "median", "producers": producers, "rounds": len(runs)}
        summary.update({key: statistics.median(r[key] for r in runs) for key in _MEDIANS})
        _emit(lines, summary)
    return lines


def _emit(lines: list[dict[str, Any]], line: dict[str, Any]) -> None:
    lines.append(line)
    print(json.dumps(line, sort_keys=True), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments, run, print (and with ``--json`` write) every line."""
    parser = argparse.ArgumentParser(prog="python -m bench tasks", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--tasks", "-n", type=int, default=20_000)
    parser.add_argument("--producers", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1, 16])
    parser.add_argument("--workers", "-w", type=int, default=16)
    parser.add_argument("--no-wait-start", dest="wait_start", action="store_false",
                        help="a producer does not wait for its last task to start")
    parser.add_argument("--rounds", "-r", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the journals go (default: temp)")
    parser.add_argument("--json", default=None, help="also write every line to this file")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    lines = asyncio.run(run(args))
    if args.json:
        Path(args.json).write_text(json.dumps(lines, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
