"""The writer's commit histograms mean what ``/metrics`` says they mean.

``palyra_journal_commit_batch_events`` counts one observation per durable
commit, of the events that commit appended (a caller refused for a taken event
id adds none), and ``palyra_journal_commit_seconds`` one per commit alike.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from palyra.core.errors import AlreadyExists, ErrorCode, PalyraError
from palyra.journal import JournalConfig, JournalStore

from .helpers import draft

_TAKEN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


async def test_each_commit_counts_the_events_it_appended(store: JournalStore) -> None:
    timings, _fsync = store.commit_timings()
    assert timings is not None
    await store.append([draft(0, event_id=_TAKEN)])
    sizes = [1 + i % 3 for i in range(60)]  # concurrent appends of 1, 2 and 3 events
    calls = [store.append([draft(i * 10 + k) for k in range(n)]) for i, n in enumerate(sizes)]
    refused = [store.append([draft(-1, event_id=_TAKEN)]) for _ in range(3)]
    results = await asyncio.gather(*calls, *refused, return_exceptions=True)
    assert all(isinstance(r, AlreadyExists) for r in results[len(calls):])
    assert not any(isinstance(r, BaseException) for r in results[:len(calls)])
    store.close()  # the writer observes a commit after answering it: let it finish
    batches = timings.batch_events
    assert batches.sum == 1 + sum(sizes)
    assert sum(batches.counts) == sum(timings.commit_seconds.counts)
    assert sum(batches.counts) < 1 + len(calls)  # grouped: fewer commits than calls
    assert timings.failures == 0 and timings.last_failure == ""


async def test_a_commit_that_fails_counts_a_failure_not_its_events(data_dir: Path) -> None:
    store = JournalStore.open(data_dir, config=JournalConfig(sync=True))  # LMDB's commit log
    try:
        timings, _fsync = store.commit_timings()
        assert timings is not None and store.env.durable is not None
        await store.append([draft(0)])
        store.env.durable.broken = OSError("disk gone")  # a failed flush: commits refused
        with pytest.raises(PalyraError) as raised:
            await store.append([draft(1), draft(2)])
        assert raised.value.code is ErrorCode.UNAVAILABLE
        store.env.durable.broken = None
        store.close()  # the writer observes a commit after answering it: let it finish
        assert timings.failures == 1 and timings.last_failure  # what the commit failed on
        assert timings.batch_events.sum == 1
        assert sum(timings.batch_events.counts) == 1
        assert sum(timings.commit_seconds.counts) == 2
    finally:
        store.close()


class _HeardOnTheWritersThread:
    """An event loop stand-in that runs a commit's answer at once, in the thread that
    answers (the writer's): what the answer sees is what was counted before it."""

    def __init__(self, timings: Any) -> None:
        self.timings = timings
        self.seen: list[tuple[int, float]] = []
        self.heard = threading.Event()

    def call_soon_threadsafe(self, callback: Any, *args: Any) -> None:
        callback(*args)

    def done(self) -> bool:
        return False

    def set_result(self, result: Any) -> None:
        self.seen.append((sum(self.timings.commit_seconds.counts), self.timings.batch_events.sum))
        self.heard.set()

    def set_exception(self, exception: BaseException) -> None:
        self.heard.set()
        raise exception


def test_a_commit_is_counted_before_its_caller_hears_of_it(data_dir: Path) -> None:
    # LMDB's writer counts a commit's timings before it wakes the caller: once woken,
    # the caller's loop wants the GIL, and work left on the writer would hold it up.
    store = JournalStore.open(data_dir, config=JournalConfig(sync=True))
    try:
        timings, _fsync = store.commit_timings()
        assert timings is not None
        for i in range(3):
            probe = _HeardOnTheWritersThread(timings)
            store.submit([draft(i)], loop=probe, answer=probe)  # type: ignore[arg-type]
            assert probe.heard.wait(10)
            assert probe.seen == [(i + 1, i + 1)]
    finally:
        store.close()
