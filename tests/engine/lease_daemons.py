"""Engines on one PostgreSQL journal, each standing for a daemon (the lease tests' helpers)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import psycopg
from engine_harness import USER, Harness, fast_config, loop_text
from palyra_gen.palyra import v1 as pb

from palyra.app import PalyraApp
from palyra.journal import JournalConfig
from palyra.journal.postgres.store import PostgresJournalStore


def pg_daemon(daemons: list[Harness], tmp_path: Path, dsn: str, ttl_s: float) -> Harness:
    """One more engine on ``dsn`` (closed by the ``daemons`` fixture)."""
    harness = Harness(tmp_path / f"d{len(daemons)}", config=fast_config(),
                      journal_config=JournalConfig(backend="postgres", dsn=dsn, sync=False,
                                                   lease_ttl_s=ttl_s))
    daemons.append(harness)
    return harness


async def started(daemons: list[Harness], tmp_path: Path, dsn: str, ttl_s: float
                  ) -> tuple[Harness, PalyraApp]:
    """One more engine on ``dsn``, started: ``(harness, its app)``."""
    harness = pg_daemon(daemons, tmp_path, dsn, ttl_s)
    return harness, await harness.start()


def holder(harness: Harness, session_id: str) -> tuple[str, int, bool] | None:
    """``(owner, epoch, unexpired)`` of the session's lease row."""
    assert isinstance(harness.store, PostgresJournalStore)
    return harness.store.lease_holder("session:" + session_id)


def owner_of(harness: Harness) -> str:
    """The lease owner name of ``harness``'s engine."""
    assert harness.engine is not None and harness.engine.leases is not None
    return harness.engine.leases.owner


def expire(dsn: str, session_id: str) -> None:
    """The owner stalls: its term runs out (the database's clock decides, so move the row)."""
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE journal_lease SET expires_at = now() - interval '1 second' "
                     "WHERE name = %s", ("session:" + session_id,))


async def until(check: Callable[[], object], seconds: float = 5.0) -> None:
    """Wait until ``check()`` is truthy (fails the test after ``seconds``)."""
    async with asyncio.timeout(seconds):
        while True:
            if check():
                return
            await asyncio.sleep(0.01)


async def busy_on(app: PalyraApp) -> pb.Run:
    """An idle run (waiting for input) on ``app``'s daemon: it holds session ``busy``."""
    return (await app.create_run(USER, pb.CreateRunRequest(
        session_key="busy", input=pb.MessageInput(text=loop_text(1)), wait=True))).run
