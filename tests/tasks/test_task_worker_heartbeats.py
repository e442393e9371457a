"""A worker's heartbeats and where its handlers run, over a real store and queue.

One timer per worker renews every claim it has in flight; a task handed on to a
worker runs its handler in the asyncio task the hand-over made for it (no second
task), and a cancel heard by the heartbeat still reaches that handler.
"""

from __future__ import annotations

import asyncio

import pytest

from palyra.journal import JournalStore
from palyra.tasks import Done, FollowUp, State, TaskContext, TaskQueue, TaskWorker


def _worker_timers() -> int:
    """Timers set on the running loop by the task worker's module (its heartbeats)."""
    loop = asyncio.get_running_loop()
    scheduled = loop._scheduled  # type: ignore[attr-defined]
    return sum(1 for handle in scheduled if not handle.cancelled()
               and type(getattr(handle._callback, "__self__", None)).__module__
               == "palyra.tasks.worker")


async def _until(queue: TaskQueue, task_id: str, state: State) -> None:
    async with asyncio.timeout(5):
        while queue.require(task_id).state != state:  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def test_one_timer_keeps_every_claim_of_a_worker_alive(
        opened: tuple[JournalStore, TaskQueue]) -> None:
    store, queue = opened
    running = 0
    all_running = asyncio.Event()
    release = asyncio.Event()

    async def slow(ctx: TaskContext) -> dict[str, object]:
        nonlocal running
        running += 1
        if running == 3:
            all_running.set()
        await release.wait()
        return {"n": ctx.payload["n"]}

    # A lease of 100 ms: the tasks outlive it several times over, so each lives only
    # by its renewals.
    worker = TaskWorker(queue, {"slow": slow}, lease_ms=100, concurrency=3)
    worker.start()
    try:
        tasks = [(await queue.enqueue("slow", payload={"n": n}))[0] for n in range(3)]
        await asyncio.wait_for(all_running.wait(), 5)
        # Sampled while the claims live on renewals: never a timer per claim (none at an
        # instant when every claim's renewal is committing).
        timers = set()
        for _ in range(45):
            timers.add(_worker_timers())
            await asyncio.sleep(0.01)
        assert max(timers) <= 1, timers
        release.set()
        for task in tasks:
            await _until(queue, task.task_id, State.SUCCEEDED)
            assert queue.require(task.task_id).attempts == 1  # no lease lapsed
        beats = {task.task_id: 0 for task in tasks}
        for event in store.read_range(0, 1000):
            if event.kind == "task.heartbeat" and event.payload.get("task_id") in beats:
                beats[event.payload["task_id"]] += 1
        assert all(n >= 3 for n in beats.values()), beats
    finally:
        await worker.close()


async def test_a_handed_on_task_runs_in_its_own_task_and_hears_a_cancel(
        opened: tuple[JournalStore, TaskQueue]) -> None:
    _, queue = opened
    child_started = asyncio.Event()
    runners: list[asyncio.Task[object] | None] = []

    async def parent(ctx: TaskContext) -> Done:
        return Done(None, (FollowUp("child", "child-of-" + ctx.task.task_id),))

    async def child(ctx: TaskContext) -> None:
        runners.append(asyncio.current_task())
        child_started.set()
        await asyncio.sleep(30)

    children = TaskWorker(queue, {"child": child}, lease_ms=100)
    parents = TaskWorker(queue, {"parent": parent}, hand_to={"child": children})
    children.start()
    parents.start()
    try:
        await queue.enqueue("parent")
        await asyncio.wait_for(child_started.wait(), 5)
        [runner] = runners
        # The handler runs in the task the hand-over made (adopt), not in one of its own.
        assert runner in children._adopted
        [handed] = [t for t in queue.leased() if t.kind == "child"]
        await queue.cancel(handed.task_id, "stop")
        await _until(queue, handed.task_id, State.CANCELLED)
        assert queue.require(handed.task_id).cancel_reason == "stop"
    finally:
        await parents.close()
        await children.close()


async def test_a_stop_that_meets_a_heard_cancel_still_stops_the_run(
        opened: tuple[JournalStore, TaskQueue]) -> None:
    """The worker's stop and the heartbeat's cancel land together: the run stops (it
    does not record the cancel and carry on, or a worker's close would wait forever)."""
    _, queue = opened
    started = asyncio.Event()
    runner: list[asyncio.Task[object]] = []

    async def slow(ctx: TaskContext) -> dict[str, object]:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            runner[0].cancel()  # the stop, in the same instant as the heard cancel
            raise
        return {}

    worker = TaskWorker(queue, {"slow": slow}, lease_ms=100)
    task, _ = await queue.enqueue("slow")
    claimed = await queue.claim("w", frozenset({"slow"}), 100)
    runner.append(asyncio.ensure_future(worker.run_one(claimed)))
    await asyncio.wait_for(started.wait(), 2)
    await queue.cancel(task.task_id, "user said stop")
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(runner[0], 5)
    # The stop won: nothing was recorded with the lease (it lapses, as on any stop).
    assert queue.require(task.task_id).state == State.CANCEL_REQUESTED
    await worker.close()
