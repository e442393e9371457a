"""Commit taps: every commit's events handed to a function on the committing thread.

``/metrics`` folds the journal through a tap (no event-loop hop). A tap must see
every commit once, in the writer's wake-up, before the append returns, on both
backends; a tap that raises must cost the commit and the other consumers nothing.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

from palyra.journal import JournalStore, StoredEvent

from .helpers import draft


class _Recorder:
    """A tap that remembers the positions and the threads it was called with."""

    def __init__(self) -> None:
        self.positions: list[int] = []
        self.threads: set[int] = set()
        self.lock = threading.Lock()

    def __call__(self, pairs: Sequence[tuple[StoredEvent, int]]) -> None:
        with self.lock:
            self.threads.add(threading.get_ident())
            self.positions += [event.position for event, _size in pairs]


async def test_a_lone_tap_sees_each_commit_once_before_its_append_returns(
        store: JournalStore) -> None:
    tap = _Recorder()
    assert store.tap_commits(tap) is tap  # the only consumer: nobody else follows

    async def appender(k: int) -> None:
        for j in range(15):
            written = await store.append([draft(k * 100 + j), draft(k * 100 + j + 50)])
            assert {e.position for e in written} <= set(tap.positions)  # folded by the time it returns

    await asyncio.gather(*(appender(k) for k in range(4)))
    assert sorted(tap.positions) == list(range(1, 121))
    assert len(tap.positions) == 120  # once each
    assert threading.get_ident() not in tap.threads  # the writer's thread, not the loop's
    store.untap(tap)
    await store.append([draft(999)])
    assert len(tap.positions) == 120  # nothing after untap
    store.untap(tap)  # again is harmless


async def test_a_tap_that_raises_costs_the_commit_and_the_others_nothing(
        store: JournalStore) -> None:
    def broken(pairs: Sequence[tuple[StoredEvent, int]]) -> None:
        raise RuntimeError("a consumer's bug")

    store.tap_commits(broken)
    after = _Recorder()
    store.tap_commits(after)
    follower = store.follow(0).__aiter__()
    for i in range(5):
        written = await asyncio.wait_for(store.append([draft(i)]), 10)  # fails, not hangs
        assert [e.position for e in written] == [i + 1]
    assert after.positions == [1, 2, 3, 4, 5]
    got = [(await asyncio.wait_for(follower.__anext__(), 5)).position for _ in range(5)]
    assert got == [1, 2, 3, 4, 5]
    await follower.aclose()  # type: ignore[attr-defined]
    assert [e.position for e in store.read_range(0, 10)] == [1, 2, 3, 4, 5]
