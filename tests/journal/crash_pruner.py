"""Subprocess for the prune crash test: appends old events and prunes them, until killed.

Usage: ``python crash_pruner.py DATA_DIR``. Prints ``ready`` once the store is
open, then ``pruned <through>`` after each acknowledged prune batch.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from palyra.journal import EventDraft, JournalConfig, JournalStore, PruneOrder


async def main(data_dir: Path) -> None:
    store = JournalStore.open(data_dir, config=JournalConfig(sync=True, map_size=1 << 20))
    out = sys.stdout
    out.write("ready\n")
    out.flush()

    async def appender(k: int) -> None:
        n = 0
        while True:
            n += 1
            await store.append([
                EventDraft("crash.test", f"appender-{k}", session_id=f"s{k % 3}",
                           run_id=f"r{k}-{n // 20}", tape=True, ts_ms=1000 + n,
                           payload={"k": k, "n": n, "pad": "x" * (n % 300)})
                for _ in range(1 + n % 3)])

    async def pruner() -> None:
        n = 0
        while True:
            n += 1
            head = store.head().count
            result = await store.prune_batch(
                PruneOrder(before_ms=10**13, through=head - 1, max_records=1 + n % 4))
            out.write(f"pruned {result.through}\n")
            out.flush()
            await asyncio.sleep(0)

    await asyncio.gather(*(appender(k) for k in range(8)), pruner())


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
