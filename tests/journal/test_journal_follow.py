"""Live subscriptions: replay then follow, no gap and no duplicate at the boundary."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest

from palyra.journal import JournalConfig, JournalStore, StoredEvent
from palyra.journal.read import follow as _follow
from palyra.journal.read.follow import Deliveries

from .helpers import draft


async def _collect(iterator: object, count: int) -> list[StoredEvent]:
    out: list[StoredEvent] = []
    async for event in iterator:  # type: ignore[attr-defined]
        out.append(event)
        if len(out) == count:
            break
    return out


async def test_follow_replays_then_goes_live(store: JournalStore) -> None:
    await store.append([draft(i) for i in range(300)])  # more than one replay page

    async def writer() -> None:
        for i in range(300, 400):
            await store.append([draft(i)])
            if i % 7 == 0:
                await asyncio.sleep(0)

    follower = asyncio.ensure_future(_collect(store.follow(0), 400))
    await asyncio.sleep(0)
    await writer()
    events = await asyncio.wait_for(follower, 10)
    assert [e.position for e in events] == list(range(1, 401))


async def test_follow_from_a_cursor(store: JournalStore) -> None:
    await store.append([draft(i) for i in range(10)])
    events = await asyncio.wait_for(_collect(store.follow(7), 3), 5)
    assert [e.position for e in events] == [8, 9, 10]


async def test_follow_tape_with_concurrent_appenders(store: JournalStore) -> None:
    await store.append([draft(i, run_id="r", tape=True) for i in range(5)])
    follower = asyncio.ensure_future(_collect(store.follow_tape("r", after_seq=2), 2 + 60))

    async def appender(k: int) -> None:
        for j in range(10):
            await store.append(
                [draft(k * 100 + j, run_id="r", tape=True), draft(0, run_id="other", tape=True)]
            )

    await asyncio.gather(*(appender(k) for k in range(6)))
    events = await asyncio.wait_for(follower, 10)
    assert [e.tape_seq for e in events] == list(range(3, 65))
    assert {e.run_id for e in events} == {"r"}


async def test_follow_ends_when_the_store_closes(store: JournalStore) -> None:
    await store.append([draft(1)])
    seen: list[int] = []

    async def follow() -> None:
        async for event in store.follow(0):
            seen.append(event.position)

    task = asyncio.ensure_future(follow())
    await asyncio.sleep(0.05)
    store.close()
    await asyncio.wait_for(task, 5)
    assert seen == [1]


async def _next(iterator: object) -> StoredEvent:
    event: StoredEvent = await asyncio.wait_for(iterator.__anext__(), 5)  # type: ignore[attr-defined]
    return event


async def test_live_tape_events_come_from_memory_not_reads(
    store: JournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[int] = []
    real = store.read_tape

    def counting(run_id: str, after_seq: int = -1, *args: object) -> object:
        reads.append(after_seq)
        return real(run_id, after_seq, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "read_tape", counting)
    await store.append([draft(0, run_id="r", tape=True)])
    follower = store.follow_tape("r").__aiter__()
    assert (await _next(follower)).tape_seq == 0
    pending = asyncio.ensure_future(_next(follower))
    await asyncio.sleep(0.01)  # the follower caught up and waits, live
    reads_when_live = len(reads)
    got = []
    for i in range(1, 40):
        written = await store.append([draft(i, run_id="r", tape=True)])
        event = await pending
        assert event is written[0]  # the writer's own object: nothing decoded twice
        got.append(event.tape_seq)
        pending = asyncio.ensure_future(_next(follower))
    assert got == list(range(1, 40))
    assert len(reads) == reads_when_live
    pending.cancel()
    await follower.aclose()


async def test_commits_of_other_runs_do_not_wake_a_tape_follower(
    store: JournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    delivered: list[list[int]] = []
    real = _follow.Subscription.deliver

    def spy(self: _follow.Subscription, events: list[tuple[StoredEvent, int]]) -> None:
        delivered.append([e.tape_seq for e, _ in events])
        real(self, events)

    monkeypatch.setattr(_follow.Subscription, "deliver", spy)
    follower = store.follow_tape("mine").__aiter__()
    pending = asyncio.ensure_future(_next(follower))
    await asyncio.sleep(0.01)
    for i in range(10):
        await store.append([draft(i, run_id="other", tape=True), draft(i, run_id="mine")])
    await asyncio.sleep(0.01)
    assert delivered == [] and not pending.done()
    await store.append([draft(0, run_id="mine", tape=True), draft(1, run_id="mine", tape=True)])
    assert (await pending).tape_seq == 0
    assert delivered == [[0, 1]]
    assert (await _next(follower)).tape_seq == 1
    await follower.aclose()


async def test_a_follower_that_falls_behind_stays_bounded_and_reads_the_store(
    data_dir: Path,
) -> None:
    config = JournalConfig(sync=False, follow_buffer_events=4)
    async with JournalStore.open(data_dir, config=config) as store:
        await store.append([draft(0, run_id="r", tape=True)])
        follower = store.follow_tape("r").__aiter__()
        assert (await _next(follower)).tape_seq == 0
        pending = asyncio.ensure_future(_next(follower))
        await asyncio.sleep(0.01)
        await store.append([draft(1, run_id="r", tape=True)])
        assert (await pending).tape_seq == 1  # live, from memory
        [sub] = store._hub._by_run["r"]
        for i in range(2, 60):  # the consumer does not pull meanwhile
            await store.append([draft(i, run_id="r", tape=True)])
            await asyncio.sleep(0)
            assert len(sub.buffer) <= 4
        assert sub.overflows >= 1
        got = [(await _next(follower)).tape_seq for _ in range(2, 60)]
        assert got == list(range(2, 60))
        await follower.aclose()
        assert "r" not in store._hub._by_run  # closing the follower unsubscribes it


async def test_a_gap_in_memory_sends_the_follower_back_to_the_store(store: JournalStore) -> None:
    [first] = await store.append([draft(0, run_id="r", tape=True)])
    follower = store.follow_tape("r").__aiter__()
    assert (await _next(follower)).tape_seq == 0
    pending = asyncio.ensure_future(_next(follower))
    await asyncio.sleep(0.01)
    # A hand-off that skips tape_seq 1 (which the store does not have yet).
    bogus = msgspec.structs.replace(first, tape_seq=2, event_id="01HZZZZZZZZZZZZZZZZZZZZZZZ")
    store._hub.publish([(bogus, 10)])
    await asyncio.sleep(0.01)
    assert not pending.done()  # nothing in the store past 0: the bogus event is not yielded
    await store.append([draft(i, run_id="r", tape=True) for i in (1, 2)])
    got = [await pending, await _next(follower)]
    assert [(e.tape_seq, e.event_id != bogus.event_id) for e in got] == [(1, True), (2, True)]
    await follower.aclose()


async def test_commits_hand_off_nothing_without_followers_and_everything_with_one(
    store: JournalStore,
) -> None:
    handed: list[list[tuple[StoredEvent, int]]] = []
    writer = store._writer
    assert writer is not None
    publish = writer._on_commit

    def record(items: list[tuple[StoredEvent, int]]) -> Deliveries:
        handed.append(items)
        return publish(items)

    writer._on_commit = record
    await store.append([draft(0, run_id="r", tape=True)])
    assert handed == []  # nobody follows: no (event, size) pairs are built
    follower = store.follow_tape("r").__aiter__()
    assert (await _next(follower)).tape_seq == 0  # from the store
    pending = asyncio.ensure_future(_next(follower))
    await asyncio.sleep(0.01)
    events = await store.append([draft(1, run_id="r", tape=True), draft(2, run_id="q")])
    assert (await pending).tape_seq == 1  # live, from memory
    [items] = handed
    assert [e for e, _size in items] == events  # every event of the commit, in order
    assert all(size > 0 for _e, size in items)
    await follower.aclose()


async def test_a_commit_wakes_its_loop_once_for_callers_and_followers(store: JournalStore) -> None:
    # The writer answers the callers and feeds the followers of one event loop in
    # one call_soon_threadsafe per commit: each is a syscall and a loop wake-up.
    loop = asyncio.get_running_loop()
    real = loop.call_soon_threadsafe
    wakes: list[str] = []

    def counted(callback: Any, *args: Any, **kwargs: Any) -> Any:
        wakes.append(getattr(callback, "__name__", "?"))
        return real(callback, *args, **kwargs)

    follower = store.follow_tape("r").__aiter__()
    await store.append([draft(0, run_id="r", tape=True)])
    assert (await _next(follower)).tape_seq == 0
    pending = asyncio.ensure_future(_next(follower))
    await asyncio.sleep(0.01)
    loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
    try:
        await store.append([draft(1, run_id="r", tape=True)])
        assert (await pending).tape_seq == 1
    finally:
        loop.call_soon_threadsafe = real  # type: ignore[method-assign]
    assert len(wakes) == 1, wakes
    await follower.aclose()
