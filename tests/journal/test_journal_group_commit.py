"""Group commit: concurrent appends share commits; one bad call fails alone."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from palyra.core.errors import AlreadyExists, InvalidArgument
from palyra.core.ids import new_ulid
from palyra.journal import JournalConfig, JournalStore, verify_store

from .helpers import draft


async def test_concurrent_appends_share_commits(store: JournalStore) -> None:
    results = await asyncio.gather(
        *(
            store.append([draft(i, session_id=f"s{i % 4}", run_id="r", tape=True)])
            for i in range(64)
        )
    )
    stats = store.stats()
    assert stats.appended_events == 64 and stats.append_calls == 64
    assert stats.commits < 64
    assert stats.max_batch_calls > 1
    positions = sorted(e.position for batch in results for e in batch)
    assert positions == list(range(1, 65))
    assert sorted(e.tape_seq for batch in results for e in batch) == list(range(64))
    assert verify_store(store).ok


async def test_lone_appender_gets_one_commit_per_call(store: JournalStore) -> None:
    for i in range(5):
        await store.append([draft(i)])
    assert store.stats().commits == 5


async def test_a_bad_call_does_not_fail_its_batch(store: JournalStore) -> None:
    taken = new_ulid()
    await store.append([draft(event_id=taken)])

    async def good(i: int) -> str:
        [event] = await store.append([draft(i, session_id="s")])
        return event.event_id

    async def duplicate() -> None:
        await store.append([draft(-1, session_id="s"), draft(-2, event_id=taken)])

    async def invalid() -> None:
        await store.append([draft(payload={"n": 2**70})])

    outcomes = await asyncio.gather(
        *(good(i) for i in range(20)),
        duplicate(),
        invalid(),
        *(good(i) for i in range(20, 40)),
        return_exceptions=True,
    )
    assert isinstance(outcomes[20], AlreadyExists)
    assert isinstance(outcomes[21], InvalidArgument)
    good_ids = [o for o in outcomes if isinstance(o, str)]
    assert len(good_ids) == 40
    assert store.head().count == 41  # the duplicate call left nothing, not even its first draft
    assert sorted(e.payload["i"] for e in store.read_session("s", limit=1000)) == list(range(40))
    assert verify_store(store).ok


async def test_duplicate_ids_within_one_batch(store: JournalStore) -> None:
    same = new_ulid()
    outcomes = await asyncio.gather(
        *(store.append([draft(i, event_id=same)]) for i in range(8)), return_exceptions=True
    )
    assert sum(not isinstance(o, BaseException) for o in outcomes) == 1
    assert all(isinstance(o, AlreadyExists) for o in outcomes if isinstance(o, BaseException))
    assert store.head().count == 1


async def test_cancelled_caller_does_not_break_the_writer(store: JournalStore) -> None:
    task = asyncio.ensure_future(store.append([draft(1)]))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await store.append([draft(2)])
    # The cancelled append may or may not have been committed; nothing is torn.
    assert store.head().count in (1, 2)
    assert verify_store(store).ok


async def test_appends_from_two_event_loops(data_dir: Path) -> None:
    store = JournalStore.open(data_dir)
    try:

        def other_loop() -> int:
            async def run() -> int:
                done = await asyncio.gather(*(store.append([draft(i)]) for i in range(10)))
                return len(done)

            return asyncio.run(run())

        counts = await asyncio.gather(
            asyncio.to_thread(other_loop), *(store.append([draft(i)]) for i in range(10))
        )
        assert counts[0] == 10
        assert store.head().count == 20
    finally:
        store.close()


async def test_remembered_heads_survive_a_failed_call_and_a_full_memory(
    store: JournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writer remembers session heads and tape seqs across commits; a refused
    # call must not leave its values behind, and dropping the memory when it is
    # full must fall back to LMDB without breaking either chain.
    from palyra.journal.write import writer as _writer

    monkeypatch.setattr(_writer, "_MEMORY_LIMIT", 2)
    taken = new_ulid()
    await store.append([draft(0, event_id=taken, session_id="s0", run_id="r0", tape=True)])
    with pytest.raises(AlreadyExists):
        await store.append([draft(1, session_id="s0", run_id="r0", tape=True),
                            draft(2, event_id=taken, session_id="s0", run_id="r0", tape=True)])  # fmt: skip
    seqs: dict[str, list[int]] = {}
    for i in range(3, 40):
        [event] = await store.append(
            [draft(i, session_id=f"s{i % 5}", run_id=f"r{i % 3}", tape=True)]
        )
        seqs.setdefault(event.run_id, []).append(event.tape_seq)
    assert all(s == list(range(s[0], s[0] + len(s))) for s in seqs.values())
    assert seqs["r0"][0] == 1
    report = verify_store(store)
    assert report.ok, report.summary()


async def test_id_clashes_without_the_commit_log(data_dir: Path) -> None:
    """The same clash handling on a store without sync (plain LMDB transactions):
    an id taken by an earlier commit or by an earlier call of the batch fails its
    own call only."""
    async with JournalStore.open(data_dir, config=JournalConfig(sync=False)) as store:
        taken = new_ulid()
        await store.append([draft(event_id=taken)])
        same = new_ulid()
        outcomes = await asyncio.gather(
            *(store.append([draft(i, event_id=same)]) for i in range(4)),
            store.append([draft(9, session_id="s"), draft(10, event_id=taken)]),
            *(store.append([draft(i, session_id="s")]) for i in range(20, 24)),
            return_exceptions=True,
        )
        assert sum(not isinstance(o, BaseException) for o in outcomes[:4]) == 1
        assert all(isinstance(o, AlreadyExists) for o in outcomes[:4] if isinstance(o, BaseException))
        assert isinstance(outcomes[4], AlreadyExists)
        assert all(not isinstance(o, BaseException) for o in outcomes[5:])
        assert store.head().count == 1 + 1 + 4
        assert verify_store(store).ok


async def test_a_row_put_twice_in_one_group_commit_holds_the_last_put(data_dir: Path) -> None:
    # The planner hands a commit's entity puts to LMDB a table at a time; each
    # table's puts keep their queued order, so the later one wins in LMDB too.
    from palyra.journal import EntityWrite

    store = JournalStore.open(data_dir)
    try:
        await asyncio.gather(*(
            store.append([draft(i, session_id=f"s{i % 3}", entity_writes=(
                EntityWrite("runs", "shared", str(i).encode()),
                EntityWrite("tasks", f"own-{i}", b"x")))])
            for i in range(32)))
        assert store.stats().commits < 32  # they shared commits
    finally:
        store.close()
    reopened = JournalStore.open(data_dir)
    try:
        assert reopened.get_entity("runs", "shared") == b"31"
        assert all(reopened.get_entity("tasks", f"own-{i}") == b"x" for i in range(32))
    finally:
        reopened.close()
