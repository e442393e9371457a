"""The task queue with several daemons on one PostgreSQL journal.

Two ``JournalStore`` objects on one real server stand for two daemons, each with its
own ``TaskQueue`` (its own memory of the tasks) and its own workers. Every task must
run exactly once whichever daemon queued it, and a daemon deciding on a stale copy
of a task (its claim, a worker's report) is refused by the row's compare-and-set.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import msgspec
import pytest

from palyra.core.clock import wall_ms
from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal import EntityWrite, EventDraft, JournalConfig, JournalStore
from palyra.journal.postgres.store import PostgresJournalStore
from palyra.tasks.model import State, decode
from palyra.tasks.queue import TaskQueue
from palyra.testing.postgres import PostgresServer

KINDS = frozenset({"job"})


@pytest.fixture
async def two_daemons(tmp_path: Path, postgres_server: PostgresServer
                      ) -> AsyncIterator[tuple[TaskQueue, TaskQueue, JournalStore, JournalStore]]:
    config = JournalConfig(backend="postgres", dsn=postgres_server.create_database())
    a = JournalStore.open(tmp_path / "a", config=config)
    b = JournalStore.open(tmp_path / "b", config=config)
    qa, qb = TaskQueue(a), TaskQueue(b)
    await qa.start()
    await qb.start()
    try:
        yield qa, qb, a, b
    finally:
        await qa.close()
        await qb.close()
        a.close()
        b.close()


async def _until(check: Callable[[], object], seconds: float = 20.0) -> None:
    async with asyncio.timeout(seconds):
        while True:
            if check():
                return
            await asyncio.sleep(0.01)


def _events(store: JournalStore, kind: str, task_id: str) -> int:
    return sum(1 for e in store.read_range(0, 100_000)
               if e.kind == kind and e.payload.get("task_id") == task_id)


async def test_tasks_queued_on_either_daemon_run_once_on_whichever_is_free(
    two_daemons: tuple[TaskQueue, TaskQueue, JournalStore, JournalStore]
) -> None:
    qa, qb, a, _b = two_daemons
    ran: collections.Counter[str] = collections.Counter()
    ran_on: dict[str, str] = {}

    async def worker(queue: TaskQueue, name: str) -> None:
        while True:
            rec = await queue.claim(name, KINDS)
            ran[rec.task_id] += 1
            ran_on[rec.task_id] = name[0]
            await asyncio.sleep(0.005)  # the other daemon's workers look meanwhile
            await queue.succeed(rec.task_id, rec.lease_epoch)

    queued_on: dict[str, str] = {}

    async def enqueue(i: int) -> None:
        queue, name = (qa, "a") if i % 2 == 0 else (qb, "b")
        rec, _ = await queue.enqueue("job", payload={"i": i})
        queued_on[rec.task_id] = name

    # Half are queued before any worker waits: an enqueue that finds a worker of its
    # own daemon waiting in line is born claimed by it, so only tasks already queued
    # when the workers start make the crossing below certain rather than likely.
    for i in range(20):
        await enqueue(i)
    workers = [asyncio.create_task(worker(q, f"{d}{i}"))
               for q, d in ((qa, "a"), (qb, "b")) for i in range(2)]
    try:
        for i in range(20, 40):
            await enqueue(i)
        await _until(lambda: all((r := qa.get(t)) is not None and r.state == State.SUCCEEDED
                                 for t in queued_on))
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    assert sorted(ran.values()) == [1] * 40  # each task ran once, on one daemon
    for task_id in queued_on:  # one claim and one success committed per task
        assert (_events(a, "task.claimed", task_id), _events(a, "task.succeeded", task_id)) \
            == (1, 1), task_id
    # Each daemon's memory followed the other's enqueues: tasks ran across daemons.
    assert any(ran_on[t] != d for t, d in queued_on.items()), (ran_on, queued_on)


async def test_a_task_queued_on_one_daemon_is_run_by_the_others_worker(
    two_daemons: tuple[TaskQueue, TaskQueue, JournalStore, JournalStore]
) -> None:
    qa, qb, _a, _b = two_daemons
    rec, _ = await qa.enqueue("job")
    claimed = await asyncio.wait_for(qb.claim("b-worker", KINDS), 10)
    assert claimed.task_id == rec.task_id
    await qb.succeed(claimed.task_id, claimed.lease_epoch)
    await _until(lambda: (r := qa.get(rec.task_id)) is not None and r.state == State.SUCCEEDED)


async def test_a_stale_claimer_is_refused_and_a_moved_lease_cannot_report(
    two_daemons: tuple[TaskQueue, TaskQueue, JournalStore, JournalStore]
) -> None:
    qa, qb, a, b = two_daemons
    rec, _ = await qa.enqueue("job")
    # B's memory has it queued (``unfinished`` answers from memory; ``get`` would read
    # the table for a task memory does not hold).
    await _until(lambda: rec.task_id in {r.task_id for r in qb.unfinished()})
    # B's watcher falls behind (a lost notification, a starved thread): stopped here.
    assert isinstance(b, PostgresJournalStore) and b._watch is not None
    b._watch.stop()
    held = await qa.claim("a-worker", KINDS)
    stale = qb.get(rec.task_id)
    assert stale is not None and stale.state == State.QUEUED  # B has not seen A's claim
    # B claims from its stale memory: the row's compare-and-set refuses it, B reads the
    # row again, finds the task taken and waits for another.
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(qb.claim("b-worker", KINDS), 1.0)
    now = qb.get(rec.task_id)
    assert now is not None and now.lease_owner == "a-worker" and now.leased
    assert _events(a, "task.claimed", rec.task_id) == 1
    # B's watchdog ends A's lease; A, unaware, reports success on it: refused, unwritten.
    await qb.lapse(rec.task_id, "the worker stopped heartbeating")
    with pytest.raises(PalyraError) as refused:
        await qa.succeed(rec.task_id, held.lease_epoch)
    assert refused.value.code is ErrorCode.LEASE_STALE
    assert _events(a, "task.succeeded", rec.task_id) == 0
    final = qa.get(rec.task_id)
    assert final is not None and final.state == State.QUEUED and not final.leased


async def test_a_run_end_leaves_a_childs_change_made_meanwhile_on_another_daemon(
    two_daemons: tuple[TaskQueue, TaskQueue, JournalStore, JournalStore]
) -> None:
    """A's run ends while B's worker finishes one of its tasks, A not having seen that:
    the run's end lands, and B's success is not overwritten by A's cancel."""
    qa, qb, a, b = two_daemons
    child, _ = await qa.enqueue("job", parent_run_id="run-1")
    await _until(lambda: child.task_id in {r.task_id for r in qb.unfinished()})
    assert isinstance(a, PostgresJournalStore) and a._watch is not None
    a._watch.stop()  # A's memory falls behind: it still has the child queued
    claimed = await asyncio.wait_for(qb.claim("b-worker", KINDS), 10)
    await qb.succeed(claimed.task_id, claimed.lease_epoch)
    stale = qa.get(child.task_id)
    assert stale is not None and stale.state == State.QUEUED
    # The run's end on A, with what A's queue adds to its commit.
    async with qa.cancelling_children("run-1", "parent run run-1 ended (cancel)") as drafts:
        await a.append([EventDraft(kind="run.ended", actor="test", run_id="run-1"), *drafts])
    # A's cancel, refused by the row, reads it again and finds the task finished.
    await _until(lambda: (r := qa.get(child.task_id)) is not None and r.final)
    row = b.get_entity("tasks", "id:" + child.task_id, fresh=True)
    assert row is not None and decode(row).state == State.SUCCEEDED
    assert _events(b, "task.cancelled", child.task_id) == 0
    assert any(e.kind == "run.ended" for e in b.read_range(0, 100_000))  # it landed
    assert qa.get(child.task_id).state == State.SUCCEEDED  # type: ignore[union-attr]


async def test_a_run_end_cancels_its_children_by_compare_and_set_after_its_commit(
    two_daemons: tuple[TaskQueue, TaskQueue, JournalStore, JournalStore]
) -> None:
    """A queued child and a running child (claimed on the other daemon) of the ended run:
    the first is cancelled, the second is asked to stop, on both daemons' memories."""
    qa, qb, a, _b = two_daemons
    queued, _ = await qa.enqueue("job", parent_run_id="run-2")
    running, _ = await qa.enqueue("job", parent_run_id="run-2")
    held = await asyncio.wait_for(qb.claim("b-worker", KINDS), 10)
    await _until(lambda: (r := qa.get(held.task_id)) is not None and r.leased)
    async with qa.cancelling_children("run-2", "parent run run-2 ended (fail)") as drafts:
        await a.append([EventDraft(kind="run.ended", actor="test", run_id="run-2"), *drafts])
    other = queued if held.task_id == running.task_id else running
    await _until(lambda: (r := qb.get(other.task_id)) is not None
                 and r.state == State.CANCELLED)
    await _until(lambda: (r := qb.get(held.task_id)) is not None
                 and r.state == State.CANCEL_REQUESTED)
    assert not qa.has_children("run-2") or all(
        r.state == State.CANCEL_REQUESTED for r in qa.unfinished())


HOUR_MS = 3_600_000


@pytest.fixture
def two_stores(tmp_path: Path, postgres_server: PostgresServer
               ) -> Iterator[tuple[JournalStore, JournalStore]]:
    config = JournalConfig(backend="postgres", dsn=postgres_server.create_database())
    a = JournalStore.open(tmp_path / "a", config=config)
    b = JournalStore.open(tmp_path / "b", config=config)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


async def test_a_daemon_whose_clock_runs_ahead_does_not_take_a_live_lease(
    two_stores: tuple[JournalStore, JournalStore]
) -> None:
    a, b = two_stores
    qa = TaskQueue(a)
    await qa.start()
    ahead = TaskQueue(b, now_ms=lambda: wall_ms() + HOUR_MS)  # its clock: an hour ahead
    try:
        await qa.enqueue("job")
        held = await qa.claim("a-worker", KINDS, lease_ms=60_000)
        await ahead.start()  # its recovery and its timer see the lease, alive for a minute
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(ahead.claim("b-worker", KINDS), 1.0)
        row = b.get_entity("tasks", "id:" + held.task_id, fresh=True)
        assert row is not None
        assert (decode(row).lease_owner, decode(row).lease_epoch) == ("a-worker",
                                                                       held.lease_epoch)
        # The worker's heartbeat still lands, and stamps the lease on the shared clock.
        beat = await qa.heartbeat(held.task_id, held.lease_epoch, 60_000)
        assert abs(beat.lease_expires_ms - (wall_ms() + 60_000)) < 5_000
    finally:
        await ahead.close()
        await qa.close()


async def test_a_daemon_whose_clock_runs_behind_still_takes_back_a_dead_lease(
    two_stores: tuple[JournalStore, JournalStore]
) -> None:
    a, b = two_stores
    qa = TaskQueue(a)
    await qa.start()
    behind = TaskQueue(b, now_ms=lambda: wall_ms() - HOUR_MS)  # its clock: an hour behind
    await behind.start()
    try:
        rec, _ = await qa.enqueue("job")
        await _until(lambda: rec.task_id in {r.task_id for r in behind.unfinished()})
        held = await qa.claim("a-worker", KINDS, lease_ms=500)
        await qa.close()  # A dies holding the lease; nobody heartbeats it any more
        # The lease lapses half a second later on every daemon's reading of the shared
        # clock: B re-queues the task and its worker takes it.
        taken = await asyncio.wait_for(behind.claim("b-worker", KINDS), 10)
        assert taken.task_id == held.task_id and taken.lease_epoch > held.lease_epoch
        assert taken.attempts == 2
    finally:
        await behind.close()
        await qa.close()


@pytest.mark.parametrize("version", ["newer", "older"])
async def test_a_task_row_of_another_daemon_version_is_changed_and_keeps_its_fields(
        two_daemons: tuple[TaskQueue, TaskQueue, JournalStore, JournalStore],
        version: str) -> None:
    qa, qb, a, b = two_daemons
    queued, _ = await qb.enqueue("job")
    key = "id:" + queued.task_id
    # B stands for another version: a newer one's row of the task has a field A's
    # version lacks, an older one's lacks a field A's has.
    stored = b.get_entity("tasks", key, fresh=True)
    assert stored is not None
    fields = msgspec.msgpack.decode(stored)
    if version == "newer":
        other = {"added_later": {"hint": [1, 2]}, **fields, "priority": 7}
    else:
        other = {k: v for k, v in fields.items() if k != "progress_json"} | {"priority": 7}
    await b.append([EventDraft(kind="task.enqueued", actor="test", entity_writes=(
        EntityWrite("tasks", key, msgspec.msgpack.encode(other)),))])
    await _until(lambda: (r := qa.get(queued.task_id)) is not None and r.priority == 7)
    async with asyncio.timeout(10):  # not refused, and not decided again and again
        taken = await qa.claim("a-worker", KINDS)
        await qa.succeed(taken.task_id, taken.lease_epoch, {"ok": 1})
    row = a.get_entity("tasks", key, fresh=True)
    assert row is not None
    fields = msgspec.msgpack.decode(row)
    assert fields["state"] == State.SUCCEEDED and fields["result_json"] == '{"ok":1}'
    if version == "newer":
        assert fields["added_later"] == {"hint": [1, 2]}
