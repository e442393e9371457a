"""The changes decided in one event-loop pass share one journal append.

Each change still lands or fails on its own terms: a change the journal refuses fails
alone, and a claim it refuses is told why instead of looking again for ever.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal import JournalConfig, JournalStore
from palyra.tasks import State, TaskQueue, model

from .helpers import started_queue

CAP = 4096  # the journal's cap on one entity row, small enough to reach here


@pytest.fixture
async def capped(tmp_path: Path) -> AsyncIterator[tuple[JournalStore, TaskQueue]]:
    """A started queue on a fresh journal whose rows are capped at ``CAP`` bytes."""
    async with started_queue(JournalStore.open(
            tmp_path / "data", config=JournalConfig(sync=False, max_entity_bytes=CAP))) as opened:
        yield opened


async def test_enqueues_of_one_pass_are_one_append(
        opened: tuple[JournalStore, TaskQueue]) -> None:
    store, queue = opened
    before = store.stats().append_calls
    made = await asyncio.gather(*(queue.enqueue("k", payload={"i": i}) for i in range(8)))
    assert [created for _task, created in made] == [True] * 8
    assert store.stats().append_calls == before + 1  # one per enqueue, one by one
    assert sorted(queue.require(t.task_id).payload_json for t, _ in made) == sorted(
        f'{{"i":{i}}}' for i in range(8))


async def test_a_change_the_journal_refuses_fails_alone_in_its_pass(
        capped: tuple[JournalStore, TaskQueue]) -> None:
    _store, queue = capped
    await queue.enqueue("k")
    task = await queue.claim("w")
    too_big = {"text": "x" * CAP}  # the task's row with this result is over the cap
    refused, enqueued = await asyncio.gather(
        queue.succeed(task.task_id, task.lease_epoch, too_big), queue.enqueue("k2"),
        return_exceptions=True)
    assert isinstance(refused, PalyraError) and refused.code is ErrorCode.PAYLOAD_TOO_LARGE
    assert isinstance(enqueued, tuple)
    other, created = enqueued
    assert created and queue.require(other.task_id).state == State.QUEUED
    assert queue.require(task.task_id).state == State.RUNNING  # as it was
    assert (await queue.succeed(task.task_id, task.lease_epoch)).state == State.SUCCEEDED


async def test_a_claim_the_journal_refuses_is_told_why(
        capped: tuple[JournalStore, TaskQueue]) -> None:
    _store, queue = capped
    now = queue.now_ms()

    def row(size: int, claimed: bool) -> int:
        rec = model.new_task("0" * 26, "k", now, payload_json=f'{{"p":"{"x" * size}"}}')
        return len(model.encode(model.claim(rec, "w", now, model.DEFAULT_LEASE_MS)
                                if claimed else rec))

    # A payload whose queued row fits under the cap and whose claimed row does not.
    size = next(n for n in range(CAP // 2, CAP)
                if row(n, False) <= CAP - 8 and row(n, True) > CAP + 8)
    await queue.enqueue("k", payload={"p": "x" * size})
    with pytest.raises(PalyraError) as refused:
        await asyncio.wait_for(queue.claim("w"), 5)  # not looked for again and again
    assert refused.value.code is ErrorCode.PAYLOAD_TOO_LARGE
