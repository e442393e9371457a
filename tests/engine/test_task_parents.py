"""A run that ends cancelled cancels its child tasks in the same commit as its own end
(the cause), and a start-up sweep covers runs that ended by other paths."""

from __future__ import annotations

import asyncio

import pytest
from engine_harness import USER, Harness, loop_text, slow_add
from palyra_gen.palyra import v1 as pb

from palyra.core.errors import ErrorCode, PalyraError
from palyra.daemon.wiring import cancel_orphaned_tasks
from palyra.engine import RunRecord
from palyra.tasks import State, TaskQueue


async def _cancelled_run(harness: Harness, seen: list[RunRecord]) -> str:
    harness.tool = slow_add(300)
    app = await harness.start()
    assert harness.engine is not None

    async def hook(record: RunRecord) -> None:
        seen.append(record)

    harness.engine.on_run_end(hook)
    created = await app.create_run(USER, pb.CreateRunRequest(
        v=1, session_key="p", input=pb.MessageInput(text=loop_text(2)), complete=True))
    assert created.run is not None
    return created.run.run_id


async def test_the_run_end_hook_sees_the_cancelled_run(harness: Harness) -> None:
    seen: list[RunRecord] = []
    run_id = await _cancelled_run(harness, seen)
    assert harness.app is not None
    await harness.app.abort_run(USER, pb.AbortRunRequest(run_id=run_id, reason="stop"))
    async with asyncio.timeout(5):
        while not seen:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    assert [(r.run_id, r.state) for r in seen] == [(run_id, "cancelled")]


async def test_the_start_up_sweep_cancels_children_of_dead_runs(harness: Harness) -> None:
    run_id = await _cancelled_run(harness, [])
    assert harness.app is not None and harness.store is not None and harness.engine is not None
    queue = TaskQueue(harness.store)
    await queue.start()
    try:
        child, _ = await queue.enqueue("k", parent_run_id=run_id)
        other, _ = await queue.enqueue("k", parent_run_id="01J00000000000000000000000")
        assert await cancel_orphaned_tasks(harness.engine, queue) == []  # parent still live
        await harness.app.abort_run(USER, pb.AbortRunRequest(run_id=run_id, reason="stop"))
        await harness.engine.wait_run(harness.engine.get_run(
            USER.identity, run_id).identity, run_id, until_terminal=True)  # type: ignore[union-attr]
        assert await cancel_orphaned_tasks(harness.engine, queue) == [child.task_id]
        assert queue.require(child.task_id).state == State.CANCELLED
        assert queue.require(other.task_id).state == State.QUEUED
    finally:
        await queue.close()


async def test_children_are_cancelled_in_the_commit_that_ends_the_run(harness: Harness) -> None:
    run_id = await _cancelled_run(harness, [])
    assert harness.app is not None and harness.store is not None and harness.engine is not None
    queue = TaskQueue(harness.store)
    await queue.start()
    engine = harness.engine
    engine.on_run_terminal(lambda record, event: queue.cancelling_children(
        record.run_id, f"parent run ended ({event})"))
    store = harness.store
    appends: list[list[str]] = []
    real_submit = store.submit  # append goes through submit too

    def spy(drafts, **options):  # type: ignore[no-untyped-def]
        appends.append([d.kind + (":" + d.payload.get("state", "") if d.kind == "tape.status"
                                  else "") for d in drafts])
        return real_submit(drafts, **options)

    store.submit = spy  # type: ignore[method-assign]
    try:
        child, _ = await queue.enqueue("k", parent_run_id=run_id)
        await harness.app.abort_run(USER, pb.AbortRunRequest(run_id=run_id, reason="stop"))
        async with asyncio.timeout(5):
            while queue.require(child.task_id).state != State.CANCELLED:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        [ending] = [a for a in appends if "task.cancelled" in a]
        assert "tape.status:RUN_STATE_CANCELLED" in ending  # one append: cause and effect
        assert queue.require(child.task_id).cancel_reason.startswith("parent run ended")
    finally:
        store.submit = real_submit  # type: ignore[method-assign]
        await queue.close()


async def test_no_task_is_enqueued_under_a_run_that_ended(harness: Harness) -> None:
    run_id = await _cancelled_run(harness, [])
    assert harness.app is not None and harness.store is not None and harness.engine is not None
    queue = TaskQueue(harness.store)
    await queue.start()
    try:
        await harness.app.abort_run(USER, pb.AbortRunRequest(run_id=run_id, reason="stop"))
        await harness.engine.wait_run(harness.engine.get_run(
            USER.identity, run_id).identity, run_id, until_terminal=True)  # type: ignore[union-attr]
        with pytest.raises(PalyraError) as refused:
            await queue.enqueue("k", parent_run_id=run_id)
        assert refused.value.code is ErrorCode.RUN_TERMINAL
        assert queue.unfinished() == []
        unknown, _ = await queue.enqueue("k", parent_run_id="01J00000000000000000000000")
        assert queue.require(unknown.task_id).state == State.QUEUED  # unknown: not refused
    finally:
        await queue.close()


async def test_a_run_ending_waits_for_its_new_tasks_in_flight_and_refuses_later_ones(
        harness: Harness) -> None:
    run_id = await _cancelled_run(harness, [])
    assert harness.store is not None
    queue = TaskQueue(harness.store)
    await queue.start()
    try:
        arriving = asyncio.ensure_future(queue.enqueue("k", parent_run_id=run_id))
        await asyncio.sleep(0)  # its commit is in flight as the run's end is decided
        async with queue.cancelling_children(run_id, "the run ended") as drafts:
            assert [d.payload["task_id"] for d in drafts] == [(await arriving)[0].task_id]
            with pytest.raises(PalyraError) as refused:  # until the end lands
                await queue.enqueue("k", parent_run_id=run_id)
            assert refused.value.code is ErrorCode.RUN_TERMINAL
            await harness.store.append(drafts)
        assert queue.unfinished() == []
    finally:
        await queue.close()
