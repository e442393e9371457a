"""Live subscriptions: replay then follow, no gap and no duplicate at the boundary."""

from __future__ import annotations

import asyncio

from palyra.journal import JournalStore, StoredEvent

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
