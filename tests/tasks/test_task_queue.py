"""The journaled queue over a real store: idempotency, wake-ups, fencing, restarts, cancel."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal import JournalConfig, JournalStore
from palyra.tasks import Done, FollowUp, State, TaskContext, TaskQueue, TaskRecord, TaskWorker


class Clock:
    """A settable clock (ms), so lease lapses need no sleeping."""

    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.ms


async def _reopen(tmp_path: Path, store: JournalStore, queue: TaskQueue,
                  now: Clock | None = None) -> tuple[JournalStore, TaskQueue]:
    await queue.close()
    store.close()
    store = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False))
    queue = TaskQueue(store, now_ms=now) if now else TaskQueue(store)
    await queue.start()
    return store, queue


async def test_an_idempotency_key_returns_the_first_task_even_after_a_restart(
        tmp_path: Path) -> None:
    store = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False))
    queue = TaskQueue(store)
    await queue.start()
    first, created = await queue.enqueue("reflect", payload={"run": "r1"}, idempotency_key="r1")
    again, created_again = await queue.enqueue("reflect", idempotency_key="r1")
    assert created and not created_again and again == first
    store, queue = await _reopen(tmp_path, store, queue)
    third, created_third = await queue.enqueue("reflect", idempotency_key="r1")
    assert not created_third and third.task_id == first.task_id
    assert [t.task_id for t in queue.page()[0]] == [first.task_id]
    await queue.close()
    store.close()


async def test_a_waiting_claim_wakes_on_enqueue_without_polling(
        opened: tuple[JournalStore, TaskQueue]) -> None:
    _, queue = opened
    waiting = asyncio.ensure_future(queue.claim("w"))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    start = time.perf_counter()
    task, _ = await queue.enqueue("k")
    claimed = await asyncio.wait_for(waiting, 1)
    assert claimed.task_id == task.task_id and claimed.state == State.RUNNING
    assert time.perf_counter() - start < 0.1  # woken by the enqueue, not a poll period


async def test_a_delayed_task_becomes_claimable_at_its_time(
        opened: tuple[JournalStore, TaskQueue]) -> None:
    _, queue = opened
    task, _ = await queue.enqueue("k", delay_ms=150)
    start = time.perf_counter()
    claimed = await asyncio.wait_for(queue.claim("w"), 2)
    waited = time.perf_counter() - start
    assert claimed.task_id == task.task_id and 0.1 <= waited < 0.5


async def test_priority_then_age_decides_the_next_claim(
        opened: tuple[JournalStore, TaskQueue]) -> None:
    _, queue = opened
    low, _ = await queue.enqueue("k", priority=1)
    high, _ = await queue.enqueue("k", priority=9)
    other, _ = await queue.enqueue("other", priority=99)
    assert (await queue.claim("w", frozenset({"k"}))).task_id == high.task_id
    assert (await queue.claim("w", frozenset({"k"}))).task_id == low.task_id
    assert queue.require(other.task_id).state == State.QUEUED


async def test_a_stale_epoch_cannot_write_after_the_lease_moved_on(tmp_path: Path) -> None:
    clock = Clock()
    store = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False))
    queue = TaskQueue(store, now_ms=clock)
    await queue.start()
    try:
        task, _ = await queue.enqueue("k")
        old = await queue.claim("w1", lease_ms=1000)
        clock.ms += 5000  # w1 hangs: its lease lapses
        await queue._apply_due()
        lapsed = queue.require(task.task_id)
        assert lapsed.state == State.QUEUED and lapsed.attempts == 1
        clock.ms = lapsed.not_before_ms
        new = await queue.claim("w2", lease_ms=1000)
        assert new.lease_epoch == old.lease_epoch + 1
        for write in (queue.succeed(task.task_id, old.lease_epoch),
                      queue.heartbeat(task.task_id, old.lease_epoch),
                      queue.fail(task.task_id, old.lease_epoch, "late")):
            with pytest.raises(PalyraError) as info:
                await write
            assert info.value.code is ErrorCode.LEASE_STALE
        done = await queue.succeed(task.task_id, new.lease_epoch, {"ok": True})
        assert done.state == State.SUCCEEDED and done.result_json == '{"ok":true}'
    finally:
        await queue.close()
        store.close()


async def test_queued_tasks_survive_a_restart_and_running_ones_are_requeued(
        tmp_path: Path) -> None:
    store = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False))
    queue = TaskQueue(store)
    await queue.start()
    waiting, _ = await queue.enqueue("k", priority=1)
    running, _ = await queue.enqueue("k", priority=5)
    last, _ = await queue.enqueue("k", priority=3, max_attempts=1)
    assert (await queue.claim("w")).task_id == running.task_id
    assert (await queue.claim("w")).task_id == last.task_id
    store, queue = await _reopen(tmp_path, store, queue)  # the worker died with the process
    try:
        assert queue.require(waiting.task_id).state == State.QUEUED
        requeued = queue.require(running.task_id)
        assert requeued.state == State.QUEUED and requeued.attempts == 1
        failed = queue.require(last.task_id)
        assert failed.state == State.FAILED and "attempt 1 of 1" in failed.last_error
        stuck = [t for t in queue.page()[0] if t.state in (State.RUNNING, State.CANCEL_REQUESTED)]
        assert stuck == []
    finally:
        await queue.close()
        store.close()


async def test_cancel_reaches_a_running_task_through_its_heartbeat(
        opened: tuple[JournalStore, TaskQueue]) -> None:
    _, queue = opened
    started = asyncio.Event()

    async def slow(ctx: TaskContext) -> dict[str, object]:
        started.set()
        await asyncio.sleep(30)
        return {}

    worker = TaskWorker(queue, {"slow": slow}, lease_ms=100)
    worker.start()
    try:
        task, _ = await queue.enqueue("slow")
        await asyncio.wait_for(started.wait(), 2)
        asked = await queue.cancel(task.task_id, "user said stop")
        assert asked.state == State.CANCEL_REQUESTED
        async with asyncio.timeout(2):
            while queue.require(task.task_id).state != State.CANCELLED:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        assert queue.require(task.task_id).cancel_reason == "user said stop"
    finally:
        await worker.close()


async def test_a_worker_runs_retries_and_records_results(
        opened: tuple[JournalStore, TaskQueue]) -> None:
    _, queue = opened
    seen: list[int] = []

    async def flaky(ctx: TaskContext) -> dict[str, object]:
        seen.append(ctx.task.attempts)
        if ctx.task.attempts < 2:
            raise RuntimeError("first try fails")
        return {"n": ctx.payload["n"] * 2}

    worker = TaskWorker(queue, {"flaky": flaky}, lease_ms=1000)
    worker.start()
    try:
        task, _ = await queue.enqueue("flaky", payload={"n": 21})
        async with asyncio.timeout(5):  # one retry after 1 s of backoff
            while queue.require(task.task_id).state != State.SUCCEEDED:  # noqa: ASYNC110
                await asyncio.sleep(0.02)
        done = queue.require(task.task_id)
        assert seen == [1, 2] and done.result_json == '{"n":42}'
    finally:
        await worker.close()


async def test_children_of_a_run_are_cancelled_and_expiry_ends_unclaimed_work(
        tmp_path: Path) -> None:
    clock = Clock()
    store = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False))
    queue = TaskQueue(store, now_ms=clock)
    await queue.start()
    try:
        a, _ = await queue.enqueue("k", parent_run_id="run-1")
        b, _ = await queue.enqueue("k", parent_run_id="run-2")
        c, _ = await queue.enqueue("k", ttl_ms=1000)
        await queue.cancel_children("run-1", "parent run cancelled")
        assert queue.require(a.task_id).state == State.CANCELLED
        assert queue.require(b.task_id).state == State.QUEUED
        clock.ms += 2000
        await queue._apply_due()
        assert queue.require(c.task_id).state == State.EXPIRED
    finally:
        await queue.close()
        store.close()


async def test_every_change_is_a_journal_event(opened: tuple[JournalStore, TaskQueue]) -> None:
    store, queue = opened
    task, _ = await queue.enqueue("k")
    claimed = await queue.claim("w")
    await queue.succeed(task.task_id, claimed.lease_epoch)
    kinds = [(e.kind, e.payload["state"]) for e in store.read_range(0, 100)
             if e.kind.startswith("task.")]
    assert kinds == [("task.enqueued", "queued"), ("task.claimed", "running"),
                     ("task.succeeded", "succeeded")]


async def test_follow_ups_land_in_the_commit_of_the_success_once_per_key(
        tmp_path: Path) -> None:
    store = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False))
    queue = TaskQueue(store)
    await queue.start()
    known, _ = await queue.enqueue("send", payload={"n": 0}, idempotency_key="k0")
    parent, _ = await queue.enqueue("dispatch")
    claimed = await queue.claim("w", frozenset({"dispatch"}))
    before = store.stats().append_calls
    then = (FollowUp("send", "k0", {"n": 0}), FollowUp("send", "k1", {"n": 1}),
            FollowUp("send", "k1", {"n": 1}))
    await queue.succeed(parent.task_id, claimed.lease_epoch, {"ok": True}, then)
    assert store.stats().append_calls == before + 1  # the success and its follow-ups
    sends = [t for t in queue.page(kind="send")[0]]
    assert sorted(t.idempotency_key for t in sends) == ["k0", "k1"]
    assert [t.task_id for t in sends if t.idempotency_key == "k0"] == [known.task_id]
    # Claimable at once (the claimer was woken), and durable across a restart.
    fresh = await asyncio.wait_for(queue.claim("w", frozenset({"send"})), 5)
    assert fresh.idempotency_key in ("k0", "k1")
    store, queue = await _reopen(tmp_path, store, queue)
    assert sorted(t.idempotency_key for t in queue.page(kind="send")[0]) == ["k0", "k1"]
    assert queue.require(parent.task_id).state == State.SUCCEEDED
    with pytest.raises(PalyraError):
        await queue.succeed(fresh.task_id, fresh.lease_epoch + 5, None,
                            (FollowUp("send", "", {}),))
    await queue.close()
    store.close()


async def test_a_handler_hands_on_work_through_done(opened: tuple[JournalStore, TaskQueue]
                                                    ) -> None:
    _store, queue = opened
    ran: list[str] = []
    child_ran = asyncio.Event()

    async def parent(ctx: TaskContext) -> Done:
        return Done({"parent": True}, (FollowUp("child", "child-of-" + ctx.task.task_id),))

    async def child(ctx: TaskContext) -> None:
        ran.append(ctx.task.idempotency_key)
        child_ran.set()

    worker = TaskWorker(queue, {"parent": parent, "child": child}, concurrency=2)
    worker.start()
    try:
        task, _ = await queue.enqueue("parent")
        await asyncio.wait_for(child_ran.wait(), 5)
        assert ran == [f"child-of-{task.task_id}"]
        assert queue.require(task.task_id).result_json == '{"parent":true}'
    finally:
        await worker.close()


async def test_a_follow_up_handed_to_a_worker_is_born_claimed_by_it(
        opened: tuple[JournalStore, TaskQueue]) -> None:
    store, queue = opened
    child_ran = asyncio.Event()
    seen: list[TaskRecord] = []

    async def parent(ctx: TaskContext) -> Done:
        return Done(None, (FollowUp("child", "child-of-" + ctx.task.task_id),))

    async def child(ctx: TaskContext) -> None:
        seen.append(ctx.task)
        child_ran.set()

    children = TaskWorker(queue, {"child": child})
    parents = TaskWorker(queue, {"parent": parent}, hand_to={"child": children})
    children.start()
    parents.start()
    try:
        before = store.stats().append_calls
        task, _ = await queue.enqueue("parent")
        await asyncio.wait_for(child_ran.wait(), 5)
        [handed] = seen
        assert handed.lease_owner == children.owner and handed.attempts == 1
        for _ in range(500):  # the child's success lands just after its handler returned
            if queue.require(handed.task_id).state == State.SUCCEEDED:
                break
            await asyncio.sleep(0.01)
        # the parent's enqueue (born claimed: the worker's claims wait in line from its
        # start), its success with the child born claimed, the child's success: no
        # commit of the child's own claim.
        assert store.stats().append_calls == before + 3
        events = [e.kind for e in store.read_range(0, 1000)
                  if e.payload.get("task_id") == handed.task_id]
        # Born claimed: its enqueue and claim are one event (state running).
        assert events == ["task.enqueued", "task.succeeded"]
        assert queue.require(task.task_id).state == State.SUCCEEDED
    finally:
        await parents.close()
        await children.close()
