"""``python -m bench retention``: what pruning costs and what it gives back.

Usage::

    python -m bench retention [--events 20000] [--pads 100,1000,5000] [--batch 512] [--json FILE]

For each payload padding: a durable journal (``sync=True``) is filled with
``--events`` old-stamped events by 50 concurrent appenders (so records hold
several events, as in the daemon), then everything but the newest record is
pruned with ``prune_older_than`` in batches of ``--batch`` records. One JSON
line per padding: prune records/s and events/s (commits included), stored
bytes dropped, pages of ``_events`` before and after (LMDB reuses freed pages;
the file does not shrink), the file size, and ``journal verify`` events/s
before and after (after: only the kept records are hashed, tombstones are
linked).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from palyra.journal import (
    EventDraft,
    JournalConfig,
    JournalStore,
    prune_older_than,
    verify_store,
)

_APPENDERS = 50


def _pages(store: JournalStore) -> int:
    env = store.env
    with env.read() as txn:
        stat = txn.stat(env.dbs["_events"])
    return int(stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"])


async def _one(pad: int, events: int, batch: int, root: Path) -> dict[str, Any]:
    store = JournalStore.open(root / f"pad-{pad}", config=JournalConfig(sync=True))
    try:
        for start in range(0, events, _APPENDERS):
            await asyncio.gather(*(store.append([EventDraft(
                kind="bench.event", actor="bench", session_id=f"s{j % 7}", run_id=f"r{j % 5}",
                tape=True, payload={"i": start + j, "pad": "x" * pad}, ts_ms=1000 + start + j)])
                for j in range(min(_APPENDERS, events - start))))
        await store.append([EventDraft(kind="bench.event", actor="bench")])  # the newest stays
        started = time.perf_counter()
        report = verify_store(store)
        verify_before = report.events / (time.perf_counter() - started)
        pages_before = _pages(store)
        started = time.perf_counter()
        result = await prune_older_than(store, 0, batch_records=batch)
        took = time.perf_counter() - started
        pages_after = _pages(store)
        started = time.perf_counter()
        after = verify_store(store)
        verify_after = (after.events + after.pruned) / (time.perf_counter() - started)
        assert report.ok and after.ok and after.pruned == result.events
        return {
            "pad": pad, "events": events, "records": result.records,
            "prune_records_per_s": round(result.records / took),
            "prune_events_per_s": round(result.events / took),
            "bytes_freed": result.bytes_freed,
            "events_pages_before": pages_before, "events_pages_after": pages_after,
            "data_mdb_bytes": (store.env.path / "data.mdb").stat().st_size,
            "verify_positions_per_s_before": round(verify_before),
            "verify_positions_per_s_after": round(verify_after),
        }
    finally:
        store.close()


def main(argv: list[str]) -> int:
    """Run the retention workload; print one JSON line per padding."""
    parser = argparse.ArgumentParser(prog="python -m bench retention")
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--pads", default="100,1000,5000")
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    lines = []
    with tempfile.TemporaryDirectory(prefix="palyra-bench-retention-") as tmp:
        for pad in (int(p) for p in args.pads.split(",")):
            line = asyncio.run(_one(pad, args.events, args.batch, Path(tmp)))
            print(json.dumps(line), flush=True)
            lines.append(line)
    if args.json is not None:
        args.json.write_text(json.dumps(lines, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
