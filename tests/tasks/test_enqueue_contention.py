"""An enqueue whose parent run's row keeps changing under it gives up, retryably.

Two daemons on one real PostgreSQL server: B owns a busy run and commits a change of
its row again and again; A enqueues a task under that run. The enqueue is a
compare-and-set on the run's row, so each of B's commits that lands between A's read
of the row and A's commit refuses A's decision, and A decides again. The test puts
every one of B's commits there, for real: a third connection holds the journal's head
row, B's commit queues on it first and A's after it, and the head row is let go only
then (B's commit, first in line, goes before A's). A must then end with ``UNAVAILABLE``
after ``ENQUEUE_CONFLICTS`` refusals instead of deciding again forever.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import psycopg
import pytest

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal import EntityWrite, EventDraft, JournalConfig, JournalStore, StoredEvent
from palyra.tasks.queue import ENQUEUE_CONFLICTS, TaskQueue
from palyra.testing.postgres import PostgresServer

RUN = "busy-run"
_LOCK_HEAD = "SELECT 1 FROM journal_head FOR UPDATE"
_WAITERS = ("SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'")


@pytest.fixture
async def daemons(tmp_path: Path, postgres_server: PostgresServer
                  ) -> AsyncIterator[tuple[TaskQueue, JournalStore, JournalStore, str]]:
    dsn = postgres_server.create_database()
    config = JournalConfig(backend="postgres", dsn=dsn)
    a = JournalStore.open(tmp_path / "a", config=config)
    b = JournalStore.open(tmp_path / "b", config=config)
    qa = TaskQueue(a)
    await qa.start()
    try:
        yield qa, a, b, dsn
    finally:
        await qa.close()
        a.close()
        b.close()


def _step(n: int) -> EventDraft:
    """B's run takes a step: its row changes (a run row, as far as the queue reads it)."""
    row = msgspec.msgpack.encode({"state": "IN_PROGRESS", "step": n})
    return EventDraft(kind="run.step", actor="test", run_id=RUN,
                      entity_writes=(EntityWrite("runs", RUN, row),))


def _wait_for_waiters(watch: psycopg.Connection[Any], count: int) -> None:
    """Block (the event loop too) until ``count`` commits wait for the head row."""
    while watch.execute(_WAITERS).fetchone()[0] < count:  # type: ignore[index]
        time.sleep(0.002)


async def test_a_permanently_conflicting_enqueue_ends_with_a_retryable_error(
    daemons: tuple[TaskQueue, JournalStore, JournalStore, str]
) -> None:
    qa, _a, b, dsn = daemons
    await b.append([_step(0)])
    holder = psycopg.connect(dsn, autocommit=True)
    watch = psycopg.connect(dsn, autocommit=True)
    steps: list[asyncio.Future[list[StoredEvent]]] = []
    enqueue: asyncio.Task[Any] | None = None
    try:
        holder.execute("BEGIN")
        holder.execute(_LOCK_HEAD)
        enqueue = asyncio.ensure_future(qa.enqueue("job", parent_run_id=RUN))
        # A waiter may be passed by the holder's next lock, so a round of B's is not
        # always one refusal of A's: the bound leaves room for that, and still ends.
        for n in range(1, 8 * (ENQUEUE_CONFLICTS + 1)):
            # B's step queues on the head row first; nothing of A runs meanwhile (this
            # blocks the event loop), so A's next decision queues after it.
            steps.append(b.submit([_step(n)]))
            _wait_for_waiters(watch, 1)
            while not enqueue.done():  # A's decision, made on the row before B's step
                if watch.execute(_WAITERS).fetchone()[0] >= 2:  # type: ignore[index]
                    break
                await asyncio.sleep(0.002)
            if enqueue.done():
                break
            # Let B's step, then A's decision, commit; hold the head row again before
            # A (blocked with the event loop) can decide anew.
            holder.execute("ROLLBACK")
            holder.execute("BEGIN")
            holder.execute(_LOCK_HEAD)
        else:
            pytest.fail(f"the enqueue was still deciding again after {n} of B's steps")
        holder.execute("ROLLBACK")
        with pytest.raises(PalyraError) as refused:
            await enqueue
        assert refused.value.code is ErrorCode.UNAVAILABLE and refused.value.retryable
        await asyncio.gather(*steps)
        assert qa.unfinished() == []  # nothing was queued
        assert not any(e.kind == "task.enqueued" for e in b.read_range(0, 100_000))
    finally:
        if enqueue is not None and not enqueue.done():
            enqueue.cancel()
        holder.close()
        watch.close()
