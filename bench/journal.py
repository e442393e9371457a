"""Journal benchmark: durable group commit vs a SQLite WAL baseline, verify, replay, raw SHA-256.

Run ``python -m bench journal [--events N] [--rounds R] [--dir D]`` (or
``python bench/journal.py``). Prints one JSON line per configuration, a
side-by-side line and one line of ratios. Every store lives in a fresh
directory under ``--dir`` (default: the system temp dir), so all
configurations hit the same disk in the same run. At each concurrency the
journal and SQLite run in ``R`` alternating slices of ``N/R`` appends, so disk
noise on a shared machine hits both alike. The ``fsync_floor`` line times the
raw syncs on that disk: one ``fdatasync`` (what a SQLite WAL commit needs) and
``fdatasync`` + an ``O_DSYNC`` page write (what an LMDB commit needs). At
one appender a ``floor_handoff_dsync`` line runs in the same slices: the
journal's hand-offs and one frame-sized ``O_DSYNC`` write with no other work,
the most a journal of this shape can reach (``floor_vs_sqlite@1``).
The ``harness_floor`` line at each concurrency runs the same drive loop with
the same drafts against a null appender that does only what an append cannot
avoid: ``prepare`` in the caller, then a future resolved by one thread, one
``call_soon_threadsafe`` per batch (no storage, no hashing, no fsync). It is the
most this harness can do on this machine: the ``ratios`` line gives the
store's CPU per event over it (``cpu_vs_floor@C``).
At ``C`` appenders every contender appends ``max(N, 120 * C)`` events (the same
drafts): with ``N`` alone, 256 appenders would append about twelve times each over
the five slices, and a slice of a few milliseconds measures 256 tasks starting and
draining more than the store (each line's ``events`` says how many ran).
After start-up the bench freezes what it built (``gc.freeze()``), as the daemon does,
before any contender runs. ``--json FILE`` also writes every line, in order, as one
JSON list.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import gc
import hashlib
import json
import os
import queue
import resource
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from palyra.core.canonical import canonical_bytes
from palyra.core.chain import GENESIS, LINK_TAG, event_hash, event_preimage, link_hash
from palyra.journal import EventDraft, JournalConfig, JournalStore, verify_store
from palyra.journal._env import WRITER_THREAD
from palyra.journal.write.prepare import PreparedEvent, prepare

CONCURRENCY = (1, 16, 256)
MIN_APPENDS_PER_APPENDER = 120


def appends_at(appenders: int, events: int) -> int:
    """How many events each contender appends at ``appenders`` (see the module docstring)."""
    return max(events, MIN_APPENDS_PER_APPENDER * appenders)
RUNS = 8


# A caller holds its session and run ids as strings already: the drafts name
# them, not format them per append (the same drafts go to every contender).
_SESSIONS = tuple(f"s{k}" for k in range(32))
_RUNS = tuple(f"r{k}" for k in range(RUNS))


def _draft(i: int) -> EventDraft:
    # A typical tape event: a model token with a little metadata (~100 B payload).
    # Positional: kind, actor, session_id, run_id, tape, payload, principal.
    return EventDraft(
        "tape.model_token", "run_engine", _SESSIONS[i % 32], _RUNS[i % RUNS], True,
        {"model_token": {"token": f"tok{i}", "is_final": False}, "i": i}, "admin:bench",
    )  # fmt: skip


_EMITTED: list[dict[str, Any]] = []


def _emit(line: dict[str, Any]) -> None:
    _EMITTED.append(line)
    print(json.dumps(line, sort_keys=True), flush=True)


async def _drive(appenders: int, indices: Iterable[int], append: Callable[[int], Any]) -> float:
    """Run one single-event append per index from ``appenders`` concurrent tasks; seconds taken."""
    counter = iter(indices)
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    left = appenders

    async def worker() -> None:
        # One future for the whole drive instead of gather's callback per worker:
        # the harness pays as little as it can per task, for every contender alike.
        nonlocal left
        try:
            for i in counter:
                await append(i)
        except BaseException as exc:
            if not done.done():
                done.set_exception(exc)
            raise
        left -= 1
        if not left and not done.done():
            done.set_result(None)

    start = time.perf_counter()
    tasks = [loop.create_task(worker()) for _ in range(appenders)]
    try:
        await done
        return time.perf_counter() - start
    finally:
        for task in tasks:
            task.cancel()  # a no-op once done; on an error, the other workers stop


def _line(
    config: str, appenders: int, events: int, seconds: float, commits: int, cpu_s: float,
    threads: Sequence[float | None] = (None, None),
    switches: Sequence[tuple[int, int] | None] = (None, None),
) -> dict[str, Any]:
    loop_s, worker_s = threads
    loop_cs, worker_cs = switches
    return {
        "config": config,
        "appenders": appenders,
        "events": events,
        "seconds": round(seconds, 4),
        "events_per_s": round(events / seconds),
        "commits": commits,
        "events_per_commit": round(events / max(1, commits), 2),
        # Process CPU (every thread) per event: steadier than events/s on a shared machine.
        "cpu_us_per_event": round(cpu_s / events * 1e6, 1),
        # The same split by thread: the callers' event loop, and the one thread the
        # contender hands appends to (the journal's writer, SQLite's connection thread,
        # the floors' threads). At one appender every microsecond of either is latency.
        "loop_cpu_us_per_event": None if loop_s is None else round(loop_s / events * 1e6, 1),
        "worker_cpu_us_per_event": (
            None if worker_s is None else round(worker_s / events * 1e6, 1)),
        # How often each thread slept (voluntary context switches: the loop in its poll,
        # or on the GIL; the worker on its queue, the GIL or the device) and was preempted
        # (involuntary: another runnable thread took its core, which on a loaded machine
        # costs the rest of that thread's time slice). Counts, not rates: they say where a
        # slow run waited.
        "loop_sleeps_per_event": _per_event(loop_cs, 0, events),
        "loop_preempted_per_event": _per_event(loop_cs, 1, events),
        "worker_sleeps_per_event": _per_event(worker_cs, 0, events),
        "worker_preempted_per_event": _per_event(worker_cs, 1, events),
    }


def _per_event(switches: tuple[int, int] | None, kind: int, events: int) -> float | None:
    return None if switches is None else round(switches[kind] / events, 2)


def thread_cpu_s(native_id: int | None) -> float | None:
    """On-CPU seconds of one thread of this process (Linux ``schedstat``), None if unreadable.

    Exact for a thread that is waiting; a running thread's lags by at most a tick.
    """
    if native_id is None:
        return None
    try:
        with open(f"/proc/self/task/{native_id}/schedstat", "rb") as handle:
            return int(handle.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def thread_switches(native_id: int | None) -> tuple[int, int] | None:
    """``(voluntary, involuntary)`` context switches of one thread of this process so far
    (Linux ``/proc``), None if unreadable."""
    if native_id is None:
        return None
    found: dict[str, int] = {}
    try:
        with open(f"/proc/self/task/{native_id}/status", encoding="ascii") as handle:
            for line in handle:
                name, _colon, value = line.partition(":")
                if name.endswith("ctxt_switches"):
                    found[name] = int(value)
        return found["voluntary_ctxt_switches"], found["nonvoluntary_ctxt_switches"]
    except (OSError, ValueError, KeyError):
        return None


def thread_named(name: str) -> int | None:
    """The native id of this process's live thread called ``name`` (None if there is none)."""
    return next((t.native_id for t in threading.enumerate() if t.name == name), None)


class Totals:
    """One contender's wall-clock and CPU over its slices: process, event loop, its worker."""

    def __init__(self, worker: int | None) -> None:
        self.worker = worker  # native id of the thread appends are handed to
        self.seconds = self.cpu = 0.0
        self.loop: float | None = 0.0
        self.worker_cpu: float | None = 0.0
        self.loop_switches: tuple[int, int] | None = (0, 0)
        self.worker_switches: tuple[int, int] | None = (0, 0)

    async def timed(self, drive: Any) -> None:
        """Await one slice and add what it took."""
        worker = self.worker
        # The process clock brackets the thread readings (a few /proc reads a slice),
        # so the loop and the worker never add up to more than the process. The loop's
        # own clock, not its schedstat: a running thread's schedstat lags up to a tick;
        # the worker's is read while it waits for work (the slice's appends are answered).
        loop_id = threading.get_native_id()
        switches0 = thread_switches(loop_id), thread_switches(worker)
        cpu = time.process_time()
        loop0, worker0 = time.thread_time(), thread_cpu_s(worker)
        self.seconds += await drive
        loop1, worker1 = time.thread_time(), thread_cpu_s(worker)
        self.cpu += time.process_time() - cpu
        switches1 = thread_switches(loop_id), thread_switches(worker)
        self.loop = _add(self.loop, loop0, loop1)
        self.worker_cpu = _add(self.worker_cpu, worker0, worker1)
        self.loop_switches = _add_switches(self.loop_switches, switches0[0], switches1[0])
        self.worker_switches = _add_switches(self.worker_switches, switches0[1], switches1[1])

    @property
    def threads(self) -> tuple[float | None, float | None]:
        """``(event loop, worker)`` CPU seconds, None where a thread could not be read."""
        return self.loop, self.worker_cpu

    @property
    def switches(self) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
        """``(event loop, worker)`` ``(voluntary, involuntary)`` context switches."""
        return self.loop_switches, self.worker_switches


def _add_switches(
    total: tuple[int, int] | None, before: tuple[int, int] | None, after: tuple[int, int] | None
) -> tuple[int, int] | None:
    if total is None or before is None or after is None:
        return None
    return total[0] + after[0] - before[0], total[1] + after[1] - before[1]


def _add(total: float | None, before: float | None, after: float | None) -> float | None:
    if total is None or before is None or after is None:
        return None
    return total + after - before


async def bench_pair(
    root: Path, appenders: int, events: int, rounds: int
) -> list[dict[str, Any]]:
    """Durable appends through JournalStore's group commit and through SQLite, interleaved.

    With one appender a third contender runs in the same rounds: the journal's
    shape with no work (:class:`HandoffFloor`), the floor a lone append can reach.
    """
    store = JournalStore.open(root / f"lmdb-{appenders}")
    chain = SqliteChain(root / f"sqlite-{appenders}.db")
    floor = HandoffFloor(root / f"floor-{appenders}") if appenders == 1 else None
    lmdb, sqlite = Totals(thread_named(WRITER_THREAD)), Totals(chain.thread_id)
    handoff = Totals(floor.thread.native_id if floor is not None else None)
    try:
        for r in range(rounds):
            part = range(events * r // rounds, events * (r + 1) // rounds)
            await lmdb.timed(_drive(appenders, part, lambda i: store.append([_draft(i)])))
            await sqlite.timed(_drive(appenders, part, lambda i: chain.append(_draft(i))))
            if floor is not None:
                await handoff.timed(_drive(appenders, part, lambda i: floor.append(_draft(i))))
        commits = store.stats().commits
    finally:
        store.close()
        chain.close()
        if floor is not None:
            floor.close()
    lines = [
        _line("lmdb_group_commit", appenders, events, lmdb.seconds, commits, lmdb.cpu,
              lmdb.threads, lmdb.switches),
        _line("sqlite_wal_full", appenders, events, sqlite.seconds, events, sqlite.cpu,
              sqlite.threads, sqlite.switches),
    ]
    if floor is not None:
        lines.append(_line("floor_handoff_dsync", appenders, events, handoff.seconds, events,
                           handoff.cpu, handoff.threads, handoff.switches))
    return lines


class HandoffFloor:
    """A lone append's floor: the journal's thread hand-offs and one flush, no other work.

    ``prepare`` on the caller's loop, a ``SimpleQueue`` to a writer thread, one
    ``O_DSYNC`` write of a frame-sized buffer into a pre-zeroed file (what a
    journal frame costs the device), the answer through ``call_soon_threadsafe``.
    No LMDB, record, hash or frame encoding: any journal of this shape is slower.
    """

    FRAME_BYTES = 420  # a one-event frame of this bench's drafts
    SIZE = 4 << 20

    def __init__(self, path: Path) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            for at in range(0, self.SIZE, 4096):
                os.pwrite(fd, bytes(4096), at)
            os.fsync(fd)
        finally:
            os.close(fd)
        self.fd = os.open(path, os.O_RDWR | os.O_DSYNC)
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        offset, frame = 0, b"f" * self.FRAME_BYTES
        while (item := self.queue.get()) is not None:
            loop, future = item
            os.pwrite(self.fd, frame, offset)
            offset = (offset + len(frame)) % (self.SIZE - len(frame))
            loop.call_soon_threadsafe(future.set_result, None)

    async def append(self, draft: EventDraft) -> None:
        prepare([draft], JournalConfig())
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.queue.put((loop, future))
        await future

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()
        os.close(self.fd)


class NullAppender:
    """The floor of the harness: ``prepare`` in the caller, a future resolved from a thread.

    Everything an append must do whatever the store: validate and encode the
    draft, queue it to another thread, and get an answer back to the caller's
    event loop, batched like the journal's writer batches (one wake-up of the
    loop per batch). Nothing is stored.
    """

    def __init__(self) -> None:
        self.config = JournalConfig()
        self.queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.batches = 0
        self.thread = threading.Thread(target=self._run, name="bench-null-appender", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (first := self.queue.get()) is not None:
            batch = [first]
            with contextlib.suppress(queue.Empty):
                while True:
                    batch.append(self.queue.get_nowait())
            self.batches += 1
            first[0].call_soon_threadsafe(_settle_null, batch)

    def append(self, drafts: list[EventDraft]) -> asyncio.Future[list[PreparedEvent]]:
        prepared = prepare(drafts, self.config)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[PreparedEvent]] = loop.create_future()
        self.queue.put((loop, future, prepared))
        return future

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()


def _settle_null(batch: list[Any]) -> None:
    for _loop, future, prepared in batch:
        if not future.done():
            future.set_result(prepared)


async def bench_floor(appenders: int, events: int, rounds: int) -> dict[str, Any]:
    """The ``harness_floor`` line: the journal's drive loop against :class:`NullAppender`."""
    null = NullAppender()
    totals = Totals(null.thread.native_id)
    try:
        for r in range(rounds):
            part = range(events * r // rounds, events * (r + 1) // rounds)
            await totals.timed(_drive(appenders, part, lambda i: null.append([_draft(i)])))
        batches = null.batches  # "commits": the batches it answered
    finally:
        null.close()
    return _line("harness_floor", appenders, events, totals.seconds, batches, totals.cpu,
                 totals.threads, totals.switches)


def fsync_floor(root: Path, runs: int = 300) -> dict[str, Any]:
    """Median time of one sync (a SQLite WAL commit) and of LMDB's two (data, then meta)."""
    path = root / "fsync-floor"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    meta_fd = os.open(path, os.O_WRONLY | os.O_DSYNC)
    try:
        os.pwrite(fd, bytes(1 << 20), 0)
        os.fsync(fd)
        one: list[float] = []
        two: list[float] = []
        for i in range(runs):
            page = bytes([i % 256]) * 4096
            start = time.perf_counter()
            os.pwrite(fd, page, 8192 + (i % 64) * 4096)
            os.fdatasync(fd)
            one.append(time.perf_counter() - start)
            start = time.perf_counter()
            os.pwrite(fd, page, 8192 + (i % 64) * 4096)
            os.fdatasync(fd)
            os.pwrite(meta_fd, page[:128], 0)
            two.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        os.close(meta_fd)
    one_s, two_s = statistics.median(one), statistics.median(two)
    return {
        "config": "fsync_floor",
        "one_sync_us": round(one_s * 1e6),
        "two_sync_us": round(two_s * 1e6),
        "one_sync_per_s": round(1 / one_s),
        "two_sync_per_s": round(1 / two_s),
    }


class SqliteChain:
    """The same chained append on SQLite WAL ``synchronous=FULL``, one transaction per event.

    All writes go through one connection on one thread, as a real store must;
    the asyncio appenders queue on it.
    """

    def __init__(self, path: Path) -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        # The connection's one thread, started now so its CPU can be read per slice.
        self.thread_id: int | None = self.pool.submit(threading.get_native_id).result()
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute(
            "CREATE TABLE events (position INTEGER PRIMARY KEY, event_id TEXT UNIQUE, "
            "session_id TEXT, run_id TEXT, tape_seq INTEGER, kind TEXT, actor TEXT, ts_ms INTEGER, "
            "principal TEXT, payload BLOB, redactions TEXT, prev_hash BLOB, hash BLOB, "
            "global_hash BLOB)"
        )
        # The journal's indexes: event id (UNIQUE above), tape and session order.
        self.db.execute("CREATE INDEX by_tape ON events(run_id, tape_seq)")
        self.db.execute("CREATE INDEX by_session ON events(session_id, position)")
        self.position = 0
        self.head = GENESIS
        self.sessions: dict[str, bytes] = {}
        self.tape: dict[str, int] = {}

    def _write(self, event: PreparedEvent) -> None:
        position = self.position + 1
        prev = self.sessions.get(event.session_id, GENESIS)
        seq = self.tape.get(event.run_id, -1) + 1
        header = msgspec.structs.replace(event, position=position, tape_seq=seq)
        digest = event_hash(prev, header, event.redactions, event.payload)
        link = link_hash(self.head, position, digest)
        self.db.execute("BEGIN IMMEDIATE")
        self.db.execute(
            "INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                position, event.event_id, event.session_id, event.run_id, seq, event.kind,
                event.actor, event.ts_ms, event.principal, event.payload,
                json.dumps(event.redactions), prev, digest, link,
            ),
        )  # fmt: skip
        self.db.execute("COMMIT")
        self.position, self.head = position, link
        self.sessions[event.session_id] = digest
        self.tape[event.run_id] = seq

    async def append(self, draft: EventDraft) -> None:
        [event] = prepare([draft], JournalConfig())
        await asyncio.get_running_loop().run_in_executor(self.pool, self._write, event)

    def close(self) -> None:
        self.pool.shutdown()
        self.db.close()


def _loadavg() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (None where the platform has none)."""
    try:
        return [round(load, 2) for load in os.getloadavg()]
    except OSError:
        return None


def _cpu_with_children() -> float:
    """CPU seconds of this process and of its children that have ended."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)  # fmt: skip
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def bench_reads(data_dir: Path) -> list[dict[str, Any]]:
    """Verify, tape replay and raw SHA-256 over the journal written at the top concurrency."""
    # An open store is verified in one process (workers fork before a journal is
    # opened: see verify.parallel), as `palyra journal verify` walks a journal this
    # short (one segment); timed without the open, as before the workers existed.
    jobs = 1
    with JournalStore.open(data_dir, config=JournalConfig(readonly=True)) as store:
        # What a user waits for: wall-clock; and the CPU it spends.
        cpu = _cpu_with_children()
        start = time.perf_counter()
        report = verify_store(store, jobs=jobs)
        verify_s = time.perf_counter() - start
        verify_cpu = _cpu_with_children() - cpu
        assert report.ok, report.summary()
        start = time.perf_counter()
        replayed = 0
        for r in range(RUNS):
            after: int | None = -1
            while after is not None:
                page = store.read_tape(f"r{r}", after_seq=after, limit=1000)
                replayed += len(page.events)
                after = page.next_after_seq
        replay_s = time.perf_counter() - start
        preimages = []
        after_pos = 0
        while page_events := store.read_range(after_pos, 1000):
            for e in page_events:
                # A StoredEvent is an EventHeader, so it hashes as it is.
                body = event_preimage(
                    bytes.fromhex(e.prev_hash), e, e.redactions, canonical_bytes(e.payload)
                )
                preimages.append((body, LINK_TAG + bytes(32 + 8 + 32)))
            after_pos = page_events[-1].position
    start = time.perf_counter()
    for body, link in preimages:
        hashlib.sha256(body).digest()
        hashlib.sha256(link).digest()
    sha_s = time.perf_counter() - start
    n = report.events
    return [
        {"config": "verify", "events": n, "jobs": jobs, "seconds": round(verify_s, 4),
         "events_per_s": round(n / verify_s), "cpu_seconds": round(verify_cpu, 4),
         "cpu_ns_per_event": round(verify_cpu / n * 1e9)},
        {"config": "tape_replay", "events": replayed, "seconds": round(replay_s, 4),
         "events_per_s": round(replayed / replay_s)},
        {"config": "raw_sha256", "events": n, "seconds": round(sha_s, 4),
         "events_per_s": round(n / sha_s), "note": "event preimage + link preimage per event"},
    ]  # fmt: skip


async def _tlog_lines(root: Path, events: int, rounds: int) -> None:
    """The transparency log's cost (bench/tlog_cost.py)."""
    from bench import tlog_cost

    for appenders in CONCURRENCY:
        _emit(await tlog_cost.appends(root, appenders, appends_at(appenders, events), rounds,
                                      _drive, _draft))  # fmt: skip
    _emit(tlog_cost.plan_cpu(_draft))
    _tlog_size_lines()
    for line in await tlog_cost.session_export_sizes(root):
        _emit(line)
    _emit(await asyncio.to_thread(tlog_cost.verify_time, root / f"tlog-on-{CONCURRENCY[-1]}"))


def _tlog_size_lines() -> None:
    from bench import tlog_cost

    for line in tlog_cost.proof_sizes():
        _emit(line)


async def run(events: int, base: Path, rounds: int = 5, only: str = "") -> int:
    """Run every configuration and print the JSON lines."""
    root = Path(tempfile.mkdtemp(prefix="palyra-bench-journal-", dir=base))
    results: dict[tuple[str, int], dict[str, Any]] = {}
    try:
        _emit({"bench": "journal", "dir": str(root), "events_per_config": events,
               "rounds": rounds, "python": sys.version.split()[0],
               "sqlite": sqlite3.sqlite_version, "loadavg": _loadavg()})  # fmt: skip
        _emit(fsync_floor(root))
        # As the daemon does once it has started (palyra.daemon): what start-up
        # built stays out of the collector's full passes. The same for every contender.
        gc.collect()
        gc.freeze()
        if only == "tlog":
            await _tlog_lines(root, events, rounds)
            return 0
        if only == "tlog-sizes":  # bytes only: no appends to time
            from bench import tlog_cost

            _tlog_size_lines()
            for line in await tlog_cost.session_export_sizes(root):
                _emit(line)
            return 0
        for appenders in CONCURRENCY:
            n = appends_at(appenders, events)
            for line in await bench_pair(root, appenders, n, rounds):
                results[(line["config"], appenders)] = line
                _emit(line)
            floor = await bench_floor(appenders, n, rounds)
            results[(floor["config"], appenders)] = floor
            _emit(floor)
        reads = bench_reads(root / f"lmdb-{CONCURRENCY[-1]}")
        for line in reads:
            _emit(line)
        by_name = {line["config"]: line for line in reads}
        side = {
            c: (
                results[("lmdb_group_commit", c)]["events_per_s"],
                results[("sqlite_wal_full", c)]["events_per_s"],
            )
            for c in CONCURRENCY
        }
        _emit({"config": "side_by_side", "appenders": {
            str(c): {"lmdb": lm, "sqlite": sq} for c, (lm, sq) in side.items()}})  # fmt: skip
        top = CONCURRENCY[-1]
        ratios = {f"group_commit_vs_sqlite@{c}": round(lm / sq, 2) for c, (lm, sq) in side.items()}
        for c in CONCURRENCY:
            # How far the store's CPU per event is above what the harness alone costs.
            ratios[f"cpu_vs_floor@{c}"] = round(
                results[("lmdb_group_commit", c)]["cpu_us_per_event"]
                / results[("harness_floor", c)]["cpu_us_per_event"], 2)
        floor = results.get(("floor_handoff_dsync", 1))
        if floor is not None:
            # The most any journal of this shape could reach at one appender.
            ratios["floor_vs_sqlite@1"] = round(
                floor["events_per_s"] / results[("sqlite_wal_full", 1)]["events_per_s"], 2)
            # What a lone append costs the writer thread beyond the floor's thread (the
            # hand-off and the flush): at one appender it is latency, one for one.
            writer = results[("lmdb_group_commit", 1)]["worker_cpu_us_per_event"]
            if writer is not None and floor["worker_cpu_us_per_event"] is not None:
                ratios["writer_cpu_beyond_floor_us@1"] = round(
                    writer - floor["worker_cpu_us_per_event"], 1)
        ratios["verify_vs_raw_sha256"] = round(
            by_name["verify"]["events_per_s"] / by_name["raw_sha256"]["events_per_s"], 3
        )
        # The machine's load as the appends ended (the header line has it as they began):
        # on a shared machine every thread waits for a core, so a rate is read beside it.
        _emit({"config": "ratios", "headline": f"group_commit_vs_sqlite@{top}", **ratios,
               "loadavg": _loadavg()})
        await _tlog_lines(root, events, rounds)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for ``python -m bench journal``."""
    parser = argparse.ArgumentParser(prog="python -m bench journal", description=__doc__)
    parser.add_argument("--events", type=int, default=3000, help="appends per configuration")
    parser.add_argument(
        "--rounds", type=int, default=5, help="alternating journal/SQLite slices per concurrency"
    )
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--only", choices=["tlog", "tlog-sizes"], default="",
                        help="only the transparency log's lines (appends with and without the "
                             "tree, proof sizes, session export sizes, proof verification); "
                             "tlog-sizes: only the sizes (nothing timed)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write every line as one JSON list")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    events = max(1, args.events)
    _EMITTED.clear()
    code = asyncio.run(run(events, args.dir, max(1, min(args.rounds, events)), args.only))
    if args.json is not None:
        args.json.write_text(json.dumps(_EMITTED, indent=1) + "\n")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
