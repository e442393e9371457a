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

from palyra.journal import JournalConfig, JournalStore, StoredEvent
from palyra.journal.read import follow as _follow

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
    # 3: slow followers overflow to the store; 1000: they never do
    config = JournalConfig(follow_buffer_events=limit)
    followers: list[tuple[str, int, asyncio.Task[None], list[int]]] = []
    counter = 0
    async with JournalStore.open(tmp / "data", config=config) as store:
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


async def test_followers_of_other_runs_are_not_woken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with JournalStore.open(tmp_path / "data") as store:
        follower = store.follow_tape("quiet", -1)
        waiting = asyncio.ensure_future(anext(follower))
        await asyncio.sleep(0.01)
        hub = store._hub
        [quiet_sub] = hub._by_run["quiet"]
        pushes: list[int] = []
        original = _follow.Subscription.deliver

        def spy(sub: _follow.Subscription, events: list[tuple[StoredEvent, int]]) -> None:
            if sub is quiet_sub:
                pushes.append(len(events))
            original(sub, events)

        monkeypatch.setattr(_follow.Subscription, "deliver", spy)
        for i in range(5):
            await store.append([draft(i, session_id="s", run_id="busy", tape=True)])
        await asyncio.sleep(0.01)
        assert pushes == [] and not waiting.done()
        await store.append([draft(9, session_id="s", run_id="quiet", tape=True)])
        event = await asyncio.wait_for(waiting, 2)
        assert event.run_id == "quiet" and pushes == [1]
        await follower.aclose()  # type: ignore[attr-defined]


async def test_batches_are_one_commit_each_and_replay_pages_are_cut(tmp_path: Path) -> None:
    """``follow_tape_batches``: a live batch is one commit's tape events; replay comes in
    store pages of at most ``MAX_BATCH_EVENTS``; flattened, the batches are the tape."""
    async with JournalStore.open(tmp_path / "data") as store:
        big = _follow.MAX_BATCH_EVENTS + 3
        await store.append([draft(i, session_id="s", run_id="r", tape=True) for i in range(big)])
        batches = store.follow_tape_batches("r", -1)
        replayed: list[int] = []
        while len(replayed) < big:
            page = await anext(batches)
            assert 0 < len(page) <= _follow.MAX_BATCH_EVENTS
            replayed += [e.tape_seq for e in page]
        assert replayed == list(range(big))
        counter = big
        for size in (3, 1, 2):
            waiting = asyncio.ensure_future(anext(batches))
            await asyncio.sleep(0.005)
            assert not waiting.done()  # nothing new: the follower waits
            await store.append([draft(counter + i, session_id="s", run_id="r", tape=True)
                                for i in range(size)])
            counter += size
            live = await asyncio.wait_for(waiting, 2)
            assert [e.tape_seq for e in live] == list(range(counter - size, counter))
        await batches.aclose()  # type: ignore[attr-defined]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(commits=st.lists(st.integers(1, 5), min_size=1, max_size=8),
       before=st.integers(0, 8), limit=st.sampled_from([3, 1000]))
def test_a_follower_subscribed_before_the_run_starts_never_reads_to_start(
        tmp_path_factory: pytest.TempPathFactory, commits: list[int], before: int,
        limit: int) -> None:
    """``subscribe_tape`` before a run's first commit, then ``follow_tape_batches(since_start=)``:
    the whole tape once, in order, however many commits landed before the follower ran; the
    store is read only when the tiny buffer overflowed (``limit`` 3), never to start."""
    asyncio.run(_since_start(tmp_path_factory.mktemp("since"), commits, before, limit))


async def _since_start(tmp: Path, commits: list[int], before: int, limit: int) -> None:
    config = JournalConfig(follow_buffer_events=limit)
    async with JournalStore.open(tmp / "data", config=config) as store:
        reads: list[int] = []
        read_tape = store.read_tape

        def counted(run_id: str, after_seq: int = -1, limit: int = 100) -> object:
            reads.append(after_seq)
            return read_tape(run_id, after_seq, limit)

        store.read_tape = counted  # type: ignore[method-assign, assignment]
        sub = store.subscribe_tape("r")
        counter = 0
        for n in commits[:before]:  # the run commits before its follower starts
            await store.append([draft(counter + i, session_id="s", run_id="r", tape=True)
                                for i in range(n)])
            counter += n
        batches = store.follow_tape_batches("r", -1, since_start=sub)
        seen: list[int] = []
        overflowed = sub.overflowed
        for n in commits[before:]:
            await store.append([draft(counter + i, session_id="s", run_id="r", tape=True)
                                for i in range(n)])
            counter += n
        while len(seen) < counter:
            batch = await asyncio.wait_for(anext(batches), 2)
            seen += [e.tape_seq for e in batch]
        assert seen == list(range(counter))
        if not overflowed and counter <= limit:
            assert reads == [], reads  # started from memory
        await batches.aclose()  # type: ignore[attr-defined]
        assert "r" not in store._hub._by_run  # the follower's end gave the subscription back
