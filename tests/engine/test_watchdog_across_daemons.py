"""The watchdog of a daemon whose clock is wrong, on a shared (PostgreSQL) journal.

Task heartbeats are stamped on the database's clock there; a watchdog judges a lease
on that clock too, so a daemon whose clock runs an hour ahead does not lapse a live
lease, and one an hour behind still lapses a dead one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine_harness import Harness
from lease_daemons import pg_daemon

from palyra.core.clock import wall_ms
from palyra.tasks import State, TaskQueue
from palyra.watchdog import Watchdog, WatchdogConfig

HOUR_MS = 3_600_000
CONFIG = WatchdogConfig(mode="auto", stale_after_s=1.0)


async def test_a_skewed_watchdog_judges_task_leases_on_the_databases_clock(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    harness = pg_daemon(daemons, tmp_path, dsn, ttl_s=60)
    await harness.start()
    assert harness.engine is not None and harness.store is not None
    queue = TaskQueue(harness.store)
    await queue.start()
    try:
        task, _ = await queue.enqueue("reflect")
        await queue.claim("worker:quiet", lease_ms=600_000)
        ahead = Watchdog(harness.engine, queue, CONFIG,
                         now_ms=lambda: wall_ms() + HOUR_MS)
        assert await ahead.scan_once() == []  # heartbeat just now: alive
        assert queue.require(task.task_id).state == State.RUNNING
        await asyncio.sleep(CONFIG.stale_after_s + 0.3)  # the worker stays quiet
        behind = Watchdog(harness.engine, queue, CONFIG,
                          now_ms=lambda: wall_ms() - HOUR_MS)
        [incident] = await behind.scan_once()
        assert (incident.kind, incident.action) == ("task_stale", "recovered")
        assert queue.require(task.task_id).state == State.QUEUED
    finally:
        await queue.close()
