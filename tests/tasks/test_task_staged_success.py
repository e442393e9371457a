"""A handler may lay its task's success out for an append of its own (a channel dispatch's
success rides in its run's last commit): the worker then commits nothing more, and if that
append fails the worker commits the success itself, once."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from palyra.journal import EventDraft, JournalStore
from palyra.tasks import FollowUp, State, TaskQueue
from palyra.tasks.worker import Done, TaskContext, TaskWorker


async def _until(queue: TaskQueue, task_id: str, state: State) -> None:
    async with asyncio.timeout(5):
        while queue.require(task_id).state != state:  # noqa: ASYNC110
            await asyncio.sleep(0.01)


def _successes(store: JournalStore, task_id: str) -> int:
    return sum(1 for e in store.read_range(0, 1000)
               if e.kind == "task.succeeded" and e.payload.get("task_id") == task_id)


async def _run(store: JournalStore, queue: TaskQueue, land: bool) -> tuple[str, int]:
    followed: list[str] = []

    async def staging(ctx: TaskContext) -> Done:
        then = (FollowUp("after", idempotency_key=f"after:{ctx.task.task_id}"),)
        staged = ctx.stage_success is not None and ctx.stage_success({"ok": 1}, then)
        assert staged
        mine = EventDraft(kind="test.own", actor="system:test", payload={})
        if land:  # the handler's own append carries the success
            await store.append([mine, *staged.drafts])
            staged.land()
        else:  # its append failed: nothing of the success landed
            staged.abandon()
        return Done({"ok": 1}, then)

    async def after(ctx: TaskContext) -> dict[str, Any]:
        followed.append(ctx.task.task_id)
        return {}

    worker = TaskWorker(queue, {"staging": staging, "after": after}, staging={"staging"})
    worker.start()
    try:
        task = (await queue.enqueue("staging"))[0]
        await _until(queue, task.task_id, State.SUCCEEDED)
        async with asyncio.timeout(5):
            while not followed:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # a second success, if any, would land meanwhile
    finally:
        await worker.close()
    assert queue.require(task.task_id).result_json == '{"ok":1}'
    assert len(followed) == 1  # the follow-up queued once
    return task.task_id, _successes(store, task.task_id)


async def test_a_success_staged_in_the_handlers_append_is_committed_once_there(
        opened: tuple[JournalStore, TaskQueue]) -> None:
    store, queue = opened
    _task_id, successes = await _run(store, queue, land=True)
    assert successes == 1
    own = [e for e in store.read_range(0, 1000) if e.kind in ("test.own", "task.succeeded")]
    assert [e.kind for e in own][:2] == ["test.own", "task.succeeded"]
    assert own[1].position == own[0].position + 1  # in the handler's append


async def test_a_staged_success_whose_append_failed_is_committed_by_the_worker(
        opened: tuple[JournalStore, TaskQueue]) -> None:
    store, queue = opened
    _task_id, successes = await _run(store, queue, land=False)
    assert successes == 1
    assert not [e for e in store.read_range(0, 1000) if e.kind == "test.own"]


async def test_only_the_kinds_a_worker_stages_are_offered_a_staged_success(
        opened: tuple[JournalStore, TaskQueue]) -> None:
    # Laying a success out costs a closure and its state per task: a kind that does not
    # stage (every kind but a channel dispatch) gets none, and still succeeds as usual.
    _store, queue = opened
    offered: dict[str, bool] = {}

    async def look(ctx: TaskContext) -> dict[str, Any]:
        offered[ctx.task.kind] = ctx.stage_success is not None
        return {}

    worker = TaskWorker(queue, {"plain": look, "stages": look}, staging={"stages", "other"})
    worker.start()
    try:
        plain = (await queue.enqueue("plain"))[0]
        stages = (await queue.enqueue("stages"))[0]
        await _until(queue, plain.task_id, State.SUCCEEDED)
        await _until(queue, stages.task_id, State.SUCCEEDED)
    finally:
        await worker.close()
    assert offered == {"plain": False, "stages": True}


def test_a_follow_up_claimed_for_a_worker_keeps_every_other_field() -> None:
    """``FollowUp.claimed_for`` is ``dataclasses.replace`` of the claim's two fields: a
    field added to ``FollowUp`` and not carried over fails here."""
    follow = FollowUp("after", idempotency_key="after:1", payload={"a": 1}, max_attempts=7,
                      new_key=True)
    assert follow.claimed_for("worker-1", 1234) == dataclasses.replace(
        follow, claim_for="worker-1", lease_ms=1234)
    for field in dataclasses.fields(FollowUp):
        assert getattr(follow.claimed_for("w", 5), field.name) == getattr(
            dataclasses.replace(follow, claim_for="w", lease_ms=5), field.name)
