"""Subprocess for the transparency-log crash tests; killed with SIGKILL at a random point.

Usage: ``python crash_tree.py DATA_DIR complete|sign``.

``complete``: the journal's tree was dropped (a journal older than the tree);
opening it adds the records to the tree one frame per record, so the kill lands
in the middle of that. Prints ``opening`` first.

``sign``: appenders while the tree is signed after every few commits; prints
``ready``, then each acknowledged event id, and ``signed <size>`` for every
checkpoint the log acknowledged.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from palyra.journal import EventDraft, JournalConfig, JournalStore
from palyra.journal.tlog.note import parse_checkpoint, parse_note
from palyra.journal.write import writer


async def sign(data_dir: Path) -> None:
    store = JournalStore.open(data_dir, config=JournalConfig(sync=True, map_size=1 << 20))
    out = sys.stdout
    out.write("ready\n")
    out.flush()

    async def appender(k: int) -> None:
        n = 0
        while True:
            n += 1
            drafts = [EventDraft("crash.tree", f"a{k}", session_id=f"s{(k + i) % 5}",
                                 payload={"k": k, "n": n}) for i in range(1 + n % 3)]  # fmt: skip
            for event in await store.append(drafts):
                out.write(event.event_id + "\n")
            if k == 0 and n % 3 == 0:
                note = await store.sign_tree()
                out.write(f"signed {parse_checkpoint(parse_note(note).body).size}\n")
            out.flush()

    await asyncio.gather(*(appender(k) for k in range(16)))


def main() -> None:
    data_dir, mode = Path(sys.argv[1]), sys.argv[2]
    if mode == "complete":
        writer._COMPLETE_TREE_RECORDS = 1
        sys.stdout.write("opening\n")
        sys.stdout.flush()
        JournalStore.open(data_dir, config=JournalConfig(sync=True)).close()
        sys.stdout.write("opened\n")
        sys.stdout.flush()
        return
    asyncio.run(sign(data_dir))


if __name__ == "__main__":
    main()
