"""The queue's changes share group commits, pages read only their rows, memory agrees with
the journal under concurrent changes of the same tasks."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from palyra.core.errors import PalyraError
from palyra.journal import JournalConfig, JournalStore
from palyra.tasks import State, TaskQueue
from palyra.tasks import model as task_model
from palyra.tasks.queue import TABLE

from .helpers import started_queue


class CountingStore(JournalStore):
    """The real store, counting the task rows its table scans hand back."""

    rows_read = 0

    def scan_entities(self, table: str, prefix: str = "", after_key: str = "",
                      limit: int = 1000) -> list[tuple[str, bytes]]:
        rows = super().scan_entities(table, prefix, after_key, limit)
        self.rows_read += len(rows)
        return rows

    def scan_entities_before(self, table: str, before_key: str = "", limit: int = 1000
                             ) -> list[tuple[str, bytes]]:
        rows = super().scan_entities_before(table, before_key, limit)
        self.rows_read += len(rows)
        return rows


@pytest.fixture
async def opened(tmp_path: Path) -> AsyncIterator[tuple[CountingStore, TaskQueue]]:
    store = CountingStore.open(tmp_path / "data", config=JournalConfig(sync=False))
    assert isinstance(store, CountingStore)
    async with started_queue(store) as opened:
        yield opened


async def test_concurrent_enqueues_do_not_wait_for_each_others_commit(
        opened: tuple[CountingStore, TaskQueue]) -> None:
    store, queue = opened
    before = store.stats().commits
    made = await asyncio.gather(*(queue.enqueue("k", payload={"i": i}) for i in range(64)))
    assert len({rec.task_id for rec, _ in made}) == 64
    # One commit each would be 64: changes queued in one loop turn share the writer's frames.
    assert store.stats().commits - before <= 16
    assert queue.commits == 64


async def test_a_page_reads_its_rows_not_the_table(
        opened: tuple[CountingStore, TaskQueue]) -> None:
    store, queue = opened
    ids = [(await queue.enqueue("k"))[0].task_id for _ in range(600)]
    for task_id in ids[:590]:  # most tasks finished: only the table knows them
        await queue.cancel(task_id, "done with it")
    store.rows_read = 0
    page, after = queue.page(limit=10)
    assert [t.task_id for t in page] == ids[::-1][:10] and after == ids[::-1][9]
    assert store.rows_read <= 300  # one batch of rows, not all 600
    rest, after = queue.page(limit=1000, after_task_id=after)
    assert [t.task_id for t in rest] == ids[::-1][10:] and after == ""
    cancelled, _ = queue.page(state=State.CANCELLED, limit=3)
    assert [t.task_id for t in cancelled] == ids[:590][::-1][:3]
    store.rows_read = 0
    queued, after = queue.page(state=State.QUEUED, limit=4)
    assert [t.task_id for t in queued] == ids[::-1][:4] and after == ids[::-1][3]
    assert store.rows_read == 0  # an unfinished state is answered from memory


async def test_memory_agrees_with_the_table_after_racing_changes_of_the_same_tasks(
        opened: tuple[CountingStore, TaskQueue]) -> None:
    store, queue = opened
    rng = random.Random(7)
    tasks = [(await queue.enqueue("k"))[0].task_id for _ in range(40)]

    async def claim_and_finish() -> None:
        rec = await queue.claim("w", lease_ms=60_000)
        await asyncio.sleep(rng.random() / 1000)
        op = rng.choice(["succeed", "fail", "heartbeat"])
        try:
            if op == "succeed":
                await queue.succeed(rec.task_id, rec.lease_epoch)
            elif op == "fail":
                await queue.fail(rec.task_id, rec.lease_epoch, "boom")
            else:
                await queue.heartbeat(rec.task_id, rec.lease_epoch)
        except PalyraError:
            pass  # a cancel got there first: the epoch is stale

    async def cancel_some() -> None:
        for task_id in rng.sample(tasks, 15):
            await asyncio.sleep(rng.random() / 1000)
            await queue.cancel(task_id, "racing")

    await asyncio.gather(*(claim_and_finish() for _ in range(25)), cancel_some())
    for task_id in tasks:
        raw = store.get_entity(TABLE, "id:" + task_id)
        assert raw is not None
        assert queue.require(task_id) == task_model.decode(raw)
    # Every change of a task was decided on its last committed state: attempts and epochs
    # move by one per claim, never twice from the same record.
    for rec in queue.page(limit=100)[0]:
        assert rec.lease_epoch == rec.attempts


async def test_a_claimer_cancelled_while_waiting_leaves_the_line(
        opened: tuple[CountingStore, TaskQueue]) -> None:
    _, queue = opened
    gone = asyncio.ensure_future(queue.claim("gone"))
    staying = asyncio.ensure_future(queue.claim("staying"))
    await asyncio.sleep(0.01)
    gone.cancel()
    task, _ = await queue.enqueue("k")
    claimed = await asyncio.wait_for(staying, 2)
    assert claimed.task_id == task.task_id and claimed.lease_owner == "staying"
    assert queue.require(task.task_id).state == State.RUNNING
