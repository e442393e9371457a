"""Tape followers served from memory: no gap, no duplicate, bounded queues (issue 11, item 3).

Property test over a real store: commits to two runs interleave with followers
that start at random cursors and read at random speeds; queues are made tiny
so slow followers overflow and fall back to the store. Every follower must see
exactly its run's tape after its cursor, in order, once each.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palyra.journal import JournalStore, StoredEvent, _follow

from .helpers import draft

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), st.sampled_from(["ra", "rb"]), st.integers(1, 4)),
        st.tuples(st.just("follow"), st.sampled_from(["ra", "rb"]), st.integers(-1, 6),
                  st.sampled_from([0.0, 0.002])),
        st.tuples(st.just("pause"), st.integers(0, 2)),
    ),
    min_size=1, max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=_ops, limit=st.sampled_from([3, 1000]))
def test_followers_see_each_event_once_in_order(tmp_path_factory: pytest.TempPathFactory,
                                                ops: list[tuple[object, ...]],
                                                limit: int) -> None:
    asyncio.run(_scenario(tmp_path_factory.mktemp("follow"), ops, limit))


async def _consume(it: AsyncIterator[StoredEvent], seen: list[int], delay: float) -> None:
    async for event in it:
        seen.append(event.tape_seq)
        if delay:
            await asyncio.sleep(delay)  # a slow reader: its queue overflows


async def _scenario(tmp: Path, ops: list[tuple[object, ...]], limit: int) -> None:
    old_limit = _follow.MAX_QUEUED
    _follow.MAX_QUEUED = limit  # 3: slow followers overflow to the store; 1000: they never do
    followers: list[tuple[str, int, asyncio.Task[None], list[int]]] = []
    counter = 0
    try:
        async with JournalStore.open(tmp / "data") as store:
            for op in ops:
                if op[0] == "commit":
                    run, n = str(op[1]), int(op[2])  # type: ignore[call-overload]
                    drafts = []
                    for _ in range(n):
                        drafts.append(draft(counter, session_id="s", run_id=run, tape=True))
                        counter += 1
                    await store.append(drafts)
                elif op[0] == "follow":
                    run, cursor, delay = str(op[1]), int(op[2]), float(op[3])  # type: ignore[call-overload, arg-type]
                    seen: list[int] = []
                    task = asyncio.ensure_future(
                        _consume(store.follow_tape(run, cursor), seen, delay))
                    followers.append((run, cursor, task, seen))
                else:
                    for _ in range(int(op[1])):  # type: ignore[call-overload]
                        await asyncio.sleep(0)  # let followers run and wait
            for run, cursor, task, seen in followers:
                last = store.last_tape_seq(run)
                async with asyncio.timeout(5):
                    while (seen[-1] if seen else cursor) < last and not task.done():  # noqa: ASYNC110 - polls a list another task fills
                        await asyncio.sleep(0.001)
                task.cancel()
                assert seen == list(range(max(cursor, -1) + 1, last + 1)), (run, cursor, seen)
    finally:
        _follow.MAX_QUEUED = old_limit


async def test_followers_of_other_runs_are_not_woken(tmp_path: Path) -> None:
    async with JournalStore.open(tmp_path / "data") as store:
        follower = store.follow_tape("quiet", -1)
        waiting = asyncio.ensure_future(anext(follower))
        await asyncio.sleep(0.01)
        hub = store._notifier.tapes
        [quiet_sub] = hub._by_run["quiet"]
        pushes = []
        original = quiet_sub.push
        quiet_sub.push = lambda events, close: (pushes.append(len(events)),  # type: ignore[method-assign]
                                                original(events, close))[1]
        for i in range(5):
            await store.append([draft(i, session_id="s", run_id="busy", tape=True)])
        await asyncio.sleep(0.01)
        assert pushes == [] and not waiting.done()
        await store.append([draft(9, session_id="s", run_id="quiet", tape=True)])
        event = await asyncio.wait_for(waiting, 2)
        assert event.run_id == "quiet" and pushes == [1]
        await follower.aclose()  # type: ignore[attr-defined]
