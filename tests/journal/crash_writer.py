"""Subprocess for the crash test: many concurrent durable appenders, acks on stdout.

Usage: ``python crash_writer.py DATA_DIR APPENDERS [lone] [postgres DSN]``. Prints
``ready`` once the store is open, then one acknowledged event id per line (flushed),
forever. ``lone``: every append is of one event (with one appender, the writer's
short path). ``postgres DSN``: the journal is on that PostgreSQL database.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from palyra.journal import EntityWrite, EventDraft, JournalConfig, JournalStore


async def main(data_dir: Path, appenders: int, lone: bool, dsn: str) -> None:
    backend = {"backend": "postgres", "dsn": dsn} if dsn else {}
    store = JournalStore.open(
        data_dir, config=JournalConfig(sync=True, map_size=1 << 20, **backend))
    out = sys.stdout
    out.write("ready\n")
    out.flush()

    async def appender(k: int) -> None:
        n = 0
        while True:
            n += 1
            drafts = [
                EventDraft(
                    "crash.test",
                    f"appender-{k}",
                    session_id=f"s{k % 8}",
                    run_id=f"r{k % 4}",
                    tape=True,
                    payload={"k": k, "n": n, "pad": "x" * (n % 200)},
                    entity_writes=(EntityWrite("runs", f"r{k % 4}", str(n).encode()),),
                )
                for _ in range(1 if lone else 1 + n % 3)
            ]
            for event in await store.append(drafts):
                out.write(event.event_id + "\n")
            out.flush()
            if k == 0 and n % 25 == 0:
                await store.checkpoint()

    await asyncio.gather(*(appender(k) for k in range(appenders)))


if __name__ == "__main__":
    args = sys.argv[3:]
    dsn = args[args.index("postgres") + 1] if "postgres" in args else ""
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]), "lone" in args, dsn))
