"""Journal benchmark: durable group commit vs a SQLite WAL baseline, verify, replay, raw SHA-256.

Run ``python -m bench journal [--events N] [--dir D]`` (or ``python bench/journal.py``).
Prints one JSON line per configuration, then one line of ratios. Every store
lives in a fresh directory under ``--dir`` (default: the system temp dir), so
all configurations hit the same disk in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import hashlib
import json
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from palyra.core.canonical import canonical_bytes
from palyra.core.chain import GENESIS, LINK_TAG, EventHeader, event_hash, event_preimage, link_hash
from palyra.journal import EventDraft, JournalConfig, JournalStore, verify_store
from palyra.journal._prepare import PreparedEvent, prepare

CONCURRENCY = (1, 16, 256)
RUNS = 8


def _draft(i: int) -> EventDraft:
    # A typical tape event: a model token with a little metadata (~100 B payload).
    return EventDraft(
        "tape.model_token",
        "run_engine",
        session_id=f"s{i % 32}",
        run_id=f"r{i % RUNS}",
        tape=True,
        payload={"model_token": {"token": f"tok{i}", "is_final": False}, "i": i},
        principal="admin:bench",
    )


def _emit(line: dict[str, Any]) -> None:
    print(json.dumps(line, sort_keys=True), flush=True)


async def _drive(appenders: int, events: int, append: Callable[[int], Any]) -> float:
    """Run ``events`` single-event appends from ``appenders`` concurrent tasks; seconds taken."""
    counter = iter(range(events))

    async def worker() -> None:
        for i in counter:
            await append(i)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(appenders)))
    return time.perf_counter() - start


async def bench_lmdb(root: Path, appenders: int, events: int) -> dict[str, Any]:
    """Durable (sync=True) appends through JournalStore's group commit."""
    async with JournalStore.open(root / f"lmdb-{appenders}") as store:
        seconds = await _drive(appenders, events, lambda i: store.append([_draft(i)]))
        stats = store.stats()
    return {
        "config": "lmdb_group_commit",
        "appenders": appenders,
        "events": events,
        "seconds": round(seconds, 4),
        "events_per_s": round(events / seconds),
        "commits": stats.commits,
        "events_per_commit": round(events / max(1, stats.commits), 2),
    }


class SqliteChain:
    """The same chained append on SQLite WAL ``synchronous=FULL``, one transaction per event.

    All writes go through one connection on one thread, as a real store must;
    the asyncio appenders queue on it.
    """

    def __init__(self, path: Path) -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute(
            "CREATE TABLE events (position INTEGER PRIMARY KEY, event_id TEXT UNIQUE, "
            "session_id TEXT, run_id TEXT, tape_seq INTEGER, kind TEXT, actor TEXT, ts_ms INTEGER, "
            "principal TEXT, payload BLOB, redactions TEXT, prev_hash BLOB, hash BLOB, "
            "global_hash BLOB)"
        )
        self.db.execute("CREATE INDEX by_tape ON events(run_id, tape_seq)")
        self.position = 0
        self.head = GENESIS
        self.sessions: dict[str, bytes] = {}
        self.tape: dict[str, int] = {}

    def _write(self, event: PreparedEvent) -> None:
        position = self.position + 1
        prev = self.sessions.get(event.session_id, GENESIS)
        seq = self.tape.get(event.run_id, -1) + 1
        header = EventHeader(
            position, event.event_id, event.session_id, event.run_id, seq, event.kind,
            event.actor, event.ts_ms, event.principal, event.device_id, event.channel,
        )  # fmt: skip
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


async def bench_sqlite(root: Path, appenders: int, events: int) -> dict[str, Any]:
    """Baseline: durable chained appends on SQLite, one transaction per event."""
    chain = SqliteChain(root / f"sqlite-{appenders}.db")
    try:
        seconds = await _drive(appenders, events, lambda i: chain.append(_draft(i)))
    finally:
        chain.close()
    return {
        "config": "sqlite_wal_full",
        "appenders": appenders,
        "events": events,
        "seconds": round(seconds, 4),
        "events_per_s": round(events / seconds),
        "commits": events,
        "events_per_commit": 1.0,
    }


def bench_reads(data_dir: Path) -> list[dict[str, Any]]:
    """Verify, tape replay and raw SHA-256 over the journal written at the top concurrency."""
    with JournalStore.open(data_dir, config=JournalConfig(readonly=True)) as store:
        start = time.perf_counter()
        report = verify_store(store)
        verify_s = time.perf_counter() - start
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
                header = EventHeader(
                    e.position, e.event_id, e.session_id, e.run_id, e.tape_seq, e.kind,
                    e.actor, e.ts_ms, e.principal, e.device_id, e.channel,
                )  # fmt: skip
                body = event_preimage(
                    bytes.fromhex(e.prev_hash), header, e.redactions, canonical_bytes(e.payload)
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
        {"config": "verify", "events": n, "seconds": round(verify_s, 4),
         "events_per_s": round(n / verify_s)},
        {"config": "tape_replay", "events": replayed, "seconds": round(replay_s, 4),
         "events_per_s": round(replayed / replay_s)},
        {"config": "raw_sha256", "events": n, "seconds": round(sha_s, 4),
         "events_per_s": round(n / sha_s), "note": "event preimage + link preimage per event"},
    ]  # fmt: skip


async def run(events: int, base: Path) -> int:
    """Run every configuration and print the JSON lines."""
    root = Path(tempfile.mkdtemp(prefix="palyra-bench-journal-", dir=base))
    results: dict[tuple[str, int], dict[str, Any]] = {}
    try:
        _emit({"bench": "journal", "dir": str(root), "events_per_config": events,
               "python": sys.version.split()[0], "sqlite": sqlite3.sqlite_version})  # fmt: skip
        for appenders in CONCURRENCY:
            for bench in (bench_lmdb, bench_sqlite):
                line = await bench(root, appenders, events)
                results[(line["config"], appenders)] = line
                _emit(line)
        reads = bench_reads(root / f"lmdb-{CONCURRENCY[-1]}")
        for line in reads:
            _emit(line)
        by_name = {line["config"]: line for line in reads}
        top = CONCURRENCY[-1]
        ratios = {
            f"group_commit_vs_sqlite@{c}": round(
                results[("lmdb_group_commit", c)]["events_per_s"]
                / results[("sqlite_wal_full", c)]["events_per_s"], 2,
            )
            for c in CONCURRENCY
        }  # fmt: skip
        ratios["verify_vs_raw_sha256"] = round(
            by_name["verify"]["events_per_s"] / by_name["raw_sha256"]["events_per_s"], 3
        )
        _emit({"config": "ratios", "headline": f"group_commit_vs_sqlite@{top}", **ratios})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for ``python -m bench journal``."""
    parser = argparse.ArgumentParser(prog="python -m bench journal", description=__doc__)
    parser.add_argument("--events", type=int, default=3000, help="appends per configuration")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    return asyncio.run(run(max(1, args.events), args.dir))


if __name__ == "__main__":
    raise SystemExit(main())
