"""A claim shares a commit it would otherwise follow: the enqueue of the task it takes
(born claimed by a worker waiting in line), or its worker's last outcome."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from palyra.core.errors import ErrorCode, InvalidArgument, PalyraError
from palyra.journal import EventDraft, JournalConfig, JournalStore
from palyra.tasks import State, TaskContext, TaskQueue, TaskRecord, TaskWorker, model
from palyra.tasks.queue import Ride


class Clock:
    """A settable clock (ms): a delayed task comes due before the timer wakes for it."""

    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[JournalStore]:
    opened = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False))
    try:
        yield opened
    finally:
        opened.close()


def _task_events(store: JournalStore) -> list[tuple[str, str, int]]:
    """``(kind, task_id, position)`` of every task event, in journal order."""
    return [(e.kind, e.payload["task_id"], e.position) for e in store.read_range(0, 1000)
            if e.kind.startswith("task.")]


async def _in_line(queue: TaskQueue, owner: str) -> asyncio.Task[TaskRecord]:
    waiting = asyncio.ensure_future(queue.claim(owner, lease_ms=5_000))
    await asyncio.sleep(0.02)  # the claim found nothing ready and waits in line
    assert not waiting.done()
    return waiting


async def test_an_enqueue_with_a_worker_in_line_is_claimed_in_its_own_commit(
        store: JournalStore) -> None:
    queue = TaskQueue(store)
    await queue.start()
    submitted: list[list[EventDraft]] = []
    submit = store.submit

    def recording(drafts: Sequence[EventDraft], **kw: Any) -> Any:  # the real submit
        submitted.append(list(drafts))
        return submit(drafts, **kw)

    try:
        waiting = await _in_line(queue, "w")
        store.submit = recording  # type: ignore[method-assign]
        before = store.stats().append_calls
        task, created = await queue.enqueue("k", payload={"n": 1})
        claimed = await asyncio.wait_for(waiting, 2)
        # The enqueuer hears of its own change; the claimer of its claim.
        assert created and task.state == State.QUEUED and task.lease_epoch == 0
        assert claimed.task_id == task.task_id and claimed.state == State.RUNNING
        assert claimed.lease_owner == "w" and claimed.lease_epoch == 1
        assert claimed.lease_expires_ms == claimed.heartbeat_ms + 5_000
        assert store.stats().append_calls == before + 1  # not a claim commit of its own
        # Both moves in one event of the one commit: enqueued, already running under
        # the claim's owner and epoch (docs/journal/format.md, "Task events").
        events = _task_events(store)
        assert [(kind, tid) for kind, tid, _ in events] == [("task.enqueued", task.task_id)]
        [born] = [e.payload for e in store.read_range(0, 1000) if e.kind == "task.enqueued"]
        assert (born["state"], born["owner"], born["epoch"]) == ("running", "w", 1)
        assert queue.require(task.task_id) == claimed
        # The row is written once, as the claim leaves it.
        [drafts] = submitted
        rows = [[(w.table, w.key, w.value) for w in d.entity_writes] for d in drafts]
        assert rows == [[("tasks", "id:" + task.task_id, model.encode(claimed))]]
        stored = store.get_entity("tasks", "id:" + task.task_id)
        assert stored is not None and model.decode(stored) == claimed
        await queue.succeed(task.task_id, claimed.lease_epoch)
        assert queue.require(task.task_id).state == State.SUCCEEDED
    finally:
        await queue.close()


async def test_a_worker_in_line_keeps_its_place_when_an_enqueue_is_refused(
        store: JournalStore) -> None:
    queue = TaskQueue(store)
    await queue.start()
    try:
        waiting = await _in_line(queue, "w")
        with pytest.raises(InvalidArgument):  # refused by the journal before it queues
            await queue.enqueue("k", also=lambda _rec: [EventDraft(kind="", actor="t")])
        task, _ = await queue.enqueue("k")
        claimed = await asyncio.wait_for(waiting, 2)
        assert claimed.task_id == task.task_id and claimed.state == State.RUNNING
    finally:
        await queue.close()


async def test_a_worker_in_line_takes_a_task_that_came_due_before_a_new_one(
        store: JournalStore) -> None:
    clock = Clock()
    queue = TaskQueue(store, now_ms=clock)
    await queue.start()
    try:
        delayed, _ = await queue.enqueue("k", delay_ms=60_000)
        waiting = await _in_line(queue, "w")
        clock.ms += 61_000  # due now; the timer (real time) has not woken for it yet
        fresh, _ = await queue.enqueue("k")
        claimed = await asyncio.wait_for(waiting, 2)
        assert claimed.task_id == delayed.task_id  # the older task, as a claim would pick
        assert queue.require(fresh.task_id).state == State.QUEUED
    finally:
        await queue.close()


async def test_a_task_is_not_born_claimed_by_a_worker_in_line_for_other_kinds(
        store: JournalStore) -> None:
    queue = TaskQueue(store)
    await queue.start()
    try:
        other = asyncio.ensure_future(queue.claim("w-other", frozenset({"other"})))
        gone = await _in_line(queue, "w-gone")
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        task, _ = await queue.enqueue("k")
        await asyncio.sleep(0.02)
        assert queue.require(task.task_id).state == State.QUEUED
        assert not other.done()
        mine = await asyncio.wait_for(queue.claim("w", frozenset({"k"})), 2)
        assert mine.task_id == task.task_id
        other.cancel()
        with pytest.raises(asyncio.CancelledError):
            await other
    finally:
        await queue.close()


async def test_a_looping_worker_claims_its_next_task_in_its_last_success(
        store: JournalStore) -> None:
    queue = TaskQueue(store)
    await queue.start()
    started: list[str] = []
    first_done = asyncio.Event()

    async def handler(ctx: TaskContext) -> None:
        started.append(ctx.task.task_id)
        if len(started) == 1:
            await first_done.wait()

    worker = TaskWorker(queue, {"k": handler}, concurrency=1)
    a, _ = await queue.enqueue("k")
    b, _ = await queue.enqueue("k")
    worker.start()
    try:
        for _ in range(200):
            if started:
                break
            await asyncio.sleep(0.01)
        first_done.set()
        for _ in range(500):
            if queue.require(b.task_id).state == State.SUCCEEDED:
                break
            await asyncio.sleep(0.01)
        assert started == [a.task_id, b.task_id]
        events = [(kind, tid) for kind, tid, _ in _task_events(store)]
        # b's claim rides in a's success (one append, not two), and each task's own
        # moves are the lifecycle's, in order.
        assert events.index(("task.claimed", b.task_id)) == events.index(
            ("task.succeeded", a.task_id)) + 1
        # Two enqueues, a's claim, a's success with b's claim, b's success.
        assert queue.commits == 5
        for tid in (a.task_id, b.task_id):
            assert [kind for kind, t in events if t == tid] == [
                "task.enqueued", "task.claimed", "task.succeeded"]
    finally:
        await worker.close()
        await queue.close()


async def test_a_ride_is_claimed_alone_when_its_success_is_refused(
        store: JournalStore) -> None:
    queue = TaskQueue(store)
    await queue.start()
    try:
        a, _ = await queue.enqueue("k")
        b, _ = await queue.enqueue("k")
        claimed = await queue.claim("w", frozenset({"k"}))
        assert claimed.task_id == a.task_id
        begun = queue.claim_future()
        ride = Ride("w", frozenset({"k"}), model.DEFAULT_LEASE_MS, begun)
        with pytest.raises(PalyraError) as refused:  # an epoch the lease never had
            await queue.succeed_handing_on(a.task_id, claimed.lease_epoch + 1, ride=ride)
        assert refused.value.code is ErrorCode.LEASE_STALE
        # The worker's next claim is still made (else its loop would wait forever).
        nxt = await asyncio.wait_for(queue.claim("w", frozenset({"k"}), begun=begun), 2)
        assert nxt.task_id == b.task_id and nxt.lease_owner == "w"
    finally:
        await queue.close()


async def test_a_ride_with_nothing_ready_waits_in_line(store: JournalStore) -> None:
    queue = TaskQueue(store)
    await queue.start()
    try:
        a, _ = await queue.enqueue("k")
        claimed = await queue.claim("w", frozenset({"k"}))
        begun = queue.claim_future()
        ride = Ride("w", frozenset({"k"}), model.DEFAULT_LEASE_MS, begun)
        await queue.succeed_handing_on(a.task_id, claimed.lease_epoch, ride=ride)
        assert not ride.claimed.done()
        c, _ = await queue.enqueue("k")  # born claimed by the ride waiting in line
        nxt = await asyncio.wait_for(queue.claim("w", frozenset({"k"}), begun=begun), 2)
        assert nxt.task_id == c.task_id
        assert queue.require(a.task_id).state == State.SUCCEEDED
    finally:
        await queue.close()
