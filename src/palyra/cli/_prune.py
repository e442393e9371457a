"""``palyra journal prune --older-than DAYS``: through the running daemon, else on the data dir.

Like ``palyra journal checkpoint``: a running daemon holds the writer lock, so
the prune is asked of it (``JournalService.PruneJournal``, found via
``daemon.json`` and ``admin.token``); with no daemon running, the data dir is
opened directly. Either way the prune goes through the journal's writer.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from grpclib.client import Channel
from grpclib.exceptions import GRPCError
from palyra_gen.palyra import v1

from palyra.cli._checkpoint import DAEMON_TIMEOUT_S, DaemonRefused, daemon_else_data_dir
from palyra.cli._client import Target
from palyra.engine import AttachmentStore, live_run_ids
from palyra.journal import JournalStore, PruneResult, prune_older_than

EXIT_OK = 0
EXIT_ERROR = 2
DAY_MS = 86_400_000
# A large prune runs batch after batch inside the daemon; allow it time.
PRUNE_TIMEOUT_S = max(DAEMON_TIMEOUT_S, 600.0)


@dataclass(frozen=True, slots=True)
class Pruned:
    """What a prune did, whoever ran it."""

    records: int
    events: int
    bytes_freed: int
    pruned_through: int
    head_hash: str
    where: str


async def _via_daemon(target: Target, days: float) -> tuple[Pruned | None, str]:
    address = f"{target.host}:{target.port}"
    channel = Channel(target.host, target.port)
    try:
        stub = v1.JournalServiceStub(channel, metadata=target.metadata)
        async with asyncio.timeout(PRUNE_TIMEOUT_S):
            reply = await stub.prune_journal(v1.PruneJournalRequest(older_than_days=days))
    except GRPCError as exc:
        raise DaemonRefused(f"the daemon at {address} refused: {exc.status.name}: "
                            f"{exc.message}") from exc
    except OSError as exc:
        return None, f"the daemon at {address} did not answer ({exc or type(exc).__name__})"
    finally:
        channel.close()
    return Pruned(reply.records, reply.events, reply.bytes_freed, reply.pruned_through,
                  reply.head_hash, f"daemon {address}"), ""


def _on_data_dir(data_dir: Path, days: float) -> Pruned:
    """Open the data dir (taking its writer lock) and prune in process.

    Raises:
        PalyraError: ``DATA_DIR_LOCKED`` when another process holds the data dir.
    """
    store = JournalStore.open(data_dir)
    try:
        result = asyncio.run(_prune_and_collect(store, days))
    finally:
        store.close()
    return Pruned(result.records, result.events, result.bytes_freed, result.through,
                  result.head_hash, f"data dir {data_dir}")


async def _prune_and_collect(store: JournalStore, days: float) -> PruneResult:
    result = await prune_older_than(
        store, int(days * DAY_MS), live_runs=lambda: live_run_ids(store),
        batch_records=store.env.config.retention_batch_records)
    # The attachments only the pruned tapes named go too (no daemon: no one else writes).
    await AttachmentStore(store, lambda: time.time_ns() // 1_000_000).collect()
    return result


def run(data_dir: Path, days: float) -> int:
    """Prune once; print what was pruned (or the failure) and return the exit code."""
    made = daemon_else_data_dir(data_dir, lambda target: _via_daemon(target, days),
                                lambda: _on_data_dir(data_dir, days), "prune")
    if made is None:
        return EXIT_ERROR
    if made.records == 0:
        # The head hash of an empty result is all zeros: not worth printing.
        print(f"nothing to prune: no record older than {days:g} days outside live runs "
              f"(by={made.where})")
        return EXIT_OK
    print(f"pruned records={made.records} events={made.events} bytes_freed={made.bytes_freed} "
          f"pruned_through={made.pruned_through} head={made.head_hash} by={made.where}")
    return EXIT_OK
