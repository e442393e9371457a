"""A change of a task whose last change is still committing waits for that commit.

The journal answers a change's commit straight into the queue (no future of its own);
a later change of the same task must still be decided on the task as that commit
leaves it, and must hear when it lands, whether it lands or fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from palyra.journal import JournalConfig, JournalStore
from palyra.tasks import State, TaskQueue


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[JournalStore]:
    opened = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=True))
    try:
        yield opened
    finally:
        opened.close()


def _events_of(store: JournalStore, task_id: str) -> list[str]:
    return [e.kind for e in store.read_range(0, 1000)
            if e.kind.startswith("task.") and e.payload["task_id"] == task_id]


async def test_a_success_queued_behind_a_heartbeat_follows_its_commit(
        store: JournalStore) -> None:
    queue = TaskQueue(store)
    await queue.start()
    try:
        task, _created = await queue.enqueue("k")
        claimed = await queue.claim("w", lease_ms=5_000)
        beat = asyncio.ensure_future(queue.heartbeat(task.task_id, claimed.lease_epoch, 9_000))
        await asyncio.sleep(0)  # the heartbeat's change is decided and committing
        assert not beat.done()
        done = await asyncio.wait_for(queue.succeed(task.task_id, claimed.lease_epoch), 5)
        renewed = await beat
        assert renewed.state == State.RUNNING and done.state == State.SUCCEEDED
        # Decided on the renewed lease (its heartbeat instant), after it in the journal.
        assert done.heartbeat_ms == renewed.heartbeat_ms
        assert _events_of(store, task.task_id) == [
            "task.enqueued", "task.claimed", "task.heartbeat", "task.succeeded"]
    finally:
        await queue.close()


async def test_a_change_behind_a_failed_commit_is_decided_on_the_task_as_it_was(
        store: JournalStore) -> None:
    queue = TaskQueue(store)
    await queue.start()
    try:
        task, _created = await queue.enqueue("k")
        claimed = await queue.claim("w", lease_ms=5_000)
        real_submit = store.submit

        def refusing(drafts, **options):  # type: ignore[no-untyped-def]
            store.submit = real_submit  # type: ignore[method-assign]
            answer = options["answer"]
            loop = asyncio.get_running_loop()
            # As the writer would, a while later: the success is decided meanwhile.
            loop.call_later(0.05, answer.set_exception, OSError("disk gone"))
            return answer

        store.submit = refusing  # type: ignore[method-assign]
        beat = asyncio.ensure_future(queue.heartbeat(task.task_id, claimed.lease_epoch, 9_000))
        await asyncio.sleep(0)
        succeeding = asyncio.ensure_future(queue.succeed(task.task_id, claimed.lease_epoch))
        await asyncio.sleep(0.01)
        assert not beat.done() and not succeeding.done()  # the success waits for it
        done = await asyncio.wait_for(succeeding, 5)
        with pytest.raises(OSError):
            await beat
        assert done.state == State.SUCCEEDED
        assert done.heartbeat_ms == claimed.heartbeat_ms  # the heartbeat never landed
        assert _events_of(store, task.task_id) == [
            "task.enqueued", "task.claimed", "task.succeeded"]
    finally:
        await queue.close()
