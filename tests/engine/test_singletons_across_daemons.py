"""Singletons (the schedule loop, a channel's poller) with two daemons on one PostgreSQL
journal: the work runs only on the daemon holding its lease, every append it makes is
fenced by that lease, and when the lease is taken another daemon runs it instead.

(The Telegram poller's test with two daemon processes and a SIGKILL is
``tests/channels/test_polling_across_daemons.py``.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import psycopg
import pytest
from engine_harness import Harness
from lease_daemons import started, until

from palyra.core.errors import ErrorCode, PalyraError
from palyra.daemon.singletons import SINGLETON_PREFIX, Singletons, stop
from palyra.journal import EventDraft, JournalStore, StoredEvent
from palyra.journal.postgres.store import PostgresJournalStore
from palyra.schedules import PROMPT_TASK, ScheduleRecord, Schedules
from palyra.tasks import TaskQueue


def _take_over(dsn: str, name: str) -> None:
    """The holder stalls: its term runs out (the database's clock decides)."""
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE journal_lease SET expires_at = now() - interval '1 second' "
                     "WHERE name = %s", (SINGLETON_PREFIX + name,))


def _one_off(at_ms: int) -> ScheduleRecord:
    return ScheduleRecord(schedule_id="", principal="user:alice", prompt="hello", at_ms=at_ms)


def _events(store: JournalStore | None) -> list[StoredEvent]:
    """Every event in the journal (every daemon's), in order."""
    assert store is not None
    out: list[StoredEvent] = []
    while page := store.read_range(out[-1].position if out else 0, 1000):
        out += page
    return out


def _kinds(store: JournalStore | None, kind: str) -> list[dict[str, object]]:
    return [dict(e.payload) for e in _events(store) if e.kind == kind]


async def _queue(harness: Harness) -> TaskQueue:
    assert harness.store is not None
    tasks = TaskQueue(harness.store)
    await tasks.start()
    return tasks


async def test_a_holder_whose_lease_was_taken_writes_nothing_more(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, _ = await started(daemons, tmp_path, dsn, ttl_s=60)
    b, _ = await started(daemons, tmp_path, dsn, ttl_s=60)
    assert a.store is not None
    tasks_a = await _queue(a)
    schedules_a = Schedules(a.store, tasks_a)
    running: list[str] = []
    go, stale = asyncio.Event(), asyncio.Event()
    refused: list[ErrorCode] = []
    child_wrote: list[bool] = []

    def writes(tag: str) -> list[Coroutine[Any, Any, object]]:
        """A schedule created, a task queued (a compare-and-set on its key), an event."""
        assert a.store is not None
        return [schedules_a.create(_one_off(int(time.time() * 1000) + 3_600_000)),
                tasks_a.enqueue("noop", idempotency_key=f"singleton-test:{tag}"),
                a.store.append([EventDraft(kind="test.singleton_write", actor="system:test",
                                           payload={"tag": tag})])]

    async def work_a() -> None:
        running.append("a")
        for attempt in writes("held"):  # while it holds the lease, its writes land
            await attempt
        await go.wait()
        for attempt in writes("stale"):
            try:
                await attempt
            except PalyraError as exc:
                refused.append(exc.code)
        # Work it spawns is not its own: not fenced by its lease.
        child = asyncio.ensure_future(a.store.append([EventDraft(  # type: ignore[union-attr]
            kind="test.singleton_write", actor="system:test", payload={"tag": "child"})]))
        child_wrote.append(bool(await child))
        stale.set()
        await asyncio.Event().wait()

    async def work_b() -> None:
        running.append("b")
        await asyncio.Event().wait()

    # A renews every 20 s: it does not notice for a while that its lease was taken.
    holder_a = asyncio.ensure_future(Singletons(a.store, 60).run("test", work_a))
    await until(lambda: running == ["a"])
    assert b.store is not None
    standby = asyncio.ensure_future(Singletons(b.store, 0.6).run("test", work_b))
    try:
        await asyncio.sleep(1.0)  # five of B's tries: A holds, so B's work never starts
        assert running == ["a"]
        _take_over(dsn, "test")
        await until(lambda: running == ["a", "b"])
        go.set()
        await asyncio.wait_for(stale.wait(), 10)
    finally:
        for job in (holder_a, standby):
            job.cancel()
        await asyncio.gather(holder_a, standby, return_exceptions=True)
        await tasks_a.close()
    assert refused == [ErrorCode.LEASE_STALE] * 3
    assert child_wrote == [True]
    writes_seen = [p["tag"] for p in _kinds(a.store, "test.singleton_write")]
    assert writes_seen == ["held", "child"]  # the stale holder's write never landed
    assert len(_kinds(a.store, "schedule.created")) == 1
    assert [t.idempotency_key for t in tasks_a.page(kind="noop")[0]] == ["singleton-test:held"]


@pytest.mark.parametrize("ttl_s", [1.0])
async def test_schedules_fire_on_one_daemon_and_start_anew_when_its_lease_is_taken(
    daemons: list[Harness], tmp_path: Path, dsn: str, ttl_s: float
) -> None:
    harnesses = [(await started(daemons, tmp_path, dsn, ttl_s=60))[0] for _ in range(2)]
    queues = [await _queue(h) for h in harnesses]
    schedules = [Schedules(h.store, q) for h, q in zip(harnesses, queues, strict=True)]  # type: ignore[arg-type]
    running: list[str] = []
    stopped: list[str] = []

    async def work(tag: str, mine: Schedules) -> None:
        running.append(tag)
        try:
            await mine.run()
        finally:
            stopped.append(tag)

    jobs = [asyncio.ensure_future(Singletons(h.store, ttl_s).run(  # type: ignore[arg-type]
        "schedules", lambda tag=tag, mine=mine: work(tag, mine)))
        for tag, h, mine in zip("ab", harnesses, schedules, strict=True)]
    try:
        await until(lambda: len(running) == 1)
        first = running[0]
        holder, standby = (schedules[0], schedules[1]) if first == "a" else (
            schedules[1], schedules[0])
        now = int(time.time() * 1000)
        # Created on the standby too: its loop, were it running, would wake for them.
        for at_ms in (now + 300, now + 600):
            await standby.create(_one_off(at_ms))
            await holder.create(_one_off(at_ms))
        await until(lambda: len(_kinds(harnesses[0].store, "schedule.fired")) == 4)
        await asyncio.sleep(3 * ttl_s)
        assert running == [first] and stopped == []
        # One made on the standby alone: the holder's loop (asleep for up to a minute,
        # nothing of its own due) is woken by the other daemon's commit.
        await standby.create(_one_off(int(time.time() * 1000) + 300))
        await until(lambda: len(_kinds(harnesses[0].store, "schedule.fired")) == 5)
        _take_over(dsn, "schedules")
        # A new term starts on whichever daemon takes the lease first (the old holder may
        # win it back); the stalled holder stops its loop at its next renewal (until then
        # its appends are fenced out: the test above).
        await until(lambda: len(running) == 2 and stopped == [first], seconds=2 * ttl_s)
        now = int(time.time() * 1000)
        for at_ms in (now + 300, now + 600):
            await standby.create(_one_off(at_ms))
        await until(lambda: len(_kinds(harnesses[0].store, "schedule.fired")) == 7)
        await asyncio.sleep(1.0)
        assert len(running) == 2 and stopped == [first]  # one loop at a time
    finally:
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        for q in queues:
            await q.close()
    fired = _kinds(harnesses[0].store, "schedule.fired")
    assert len(fired) == 7 and len({p["schedule_id"] for p in fired}) == 7
    assert len(queues[0].page(kind=PROMPT_TASK)[0]) == 7  # one task per firing
    # Only the loop that held the lease ever ran: nothing else was written.
    kinds = {e.kind for e in _events(harnesses[0].store) if e.kind.startswith("schedule.")}
    assert kinds == {"schedule.created", "schedule.fired"}


async def test_a_clean_stop_hands_the_work_over_at_once(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, _ = await started(daemons, tmp_path, dsn, ttl_s=60)
    b, _ = await started(daemons, tmp_path, dsn, ttl_s=60)
    assert a.store is not None and b.store is not None
    running: list[str] = []

    def work(tag: str) -> Callable[[], Awaitable[None]]:
        async def forever() -> None:
            running.append(tag)
            await asyncio.Event().wait()
        return forever

    holder = asyncio.ensure_future(Singletons(a.store, 60).run("test", work("a")))
    await until(lambda: running == ["a"])
    standby = asyncio.ensure_future(Singletons(b.store, 0.6).run("test", work("b")))
    try:
        await asyncio.sleep(0.5)
        assert running == ["a"]
        await stop(holder)  # the daemon stops: its lease is released, not left to run out
        await until(lambda: running == ["a", "b"], seconds=2.0)  # A's TTL is 60 s
    finally:
        await stop(standby)


async def test_work_that_ends_by_itself_is_done_on_its_daemon(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, _ = await started(daemons, tmp_path, dsn, ttl_s=60)
    assert isinstance(a.store, PostgresJournalStore)
    runs: list[str] = []

    async def stops_for_good() -> None:  # an adapter told its token is wrong, say
        runs.append("a")

    # It returns, as it does on LMDB: not restarted here every third of the TTL.
    await asyncio.wait_for(Singletons(a.store, 0.3).run("test", stops_for_good), 5)
    assert runs == ["a"]
    row = a.store.lease_holder(SINGLETON_PREFIX + "test")
    assert row is not None and not row[2]  # released: another daemon may try it
