"""Admitting a new delivery reads no dedupe row; a redelivery is still found.

Each dedupe look-up is an LMDB read on the loop's thread, and nearly every delivery
is new: the router keeps a filter of the keys the table may hold and reads only those.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from engine_harness import Harness

from palyra.channels import ChannelRouter, ChannelsConfig, Envelope, PairingBook, records
from palyra.channels.admission import Admitter
from palyra.channels.config import ChannelPolicy
from palyra.channels.records import DedupeRec
from palyra.journal import EntityWrite, EventDraft, JournalStore
from palyra.policy import PolicyGate
from palyra.tasks import TaskQueue


def _router(harness: Harness, tasks: TaskQueue) -> ChannelRouter:
    assert harness.store is not None and harness.engine is not None
    config = ChannelsConfig(default=ChannelPolicy(dm_policy="allow", mentions=("*",)))
    return ChannelRouter(harness.store, harness.engine, tasks, PairingBook(harness.store),
                         PolicyGate.load(), config)


def _envelope(i: int) -> Envelope:
    return Envelope(envelope_id="", channel="webhook:hooks", conversation_id=f"room-{i}",
                    sender="alice", text="hello", sender_verified=True, mentions_agent=True,
                    adapter_message_id=f"m{i}")


def _count_dedupe_reads(store: JournalStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    real_get = store.get_entity

    def counting(table: str, key: str) -> bytes | None:
        if table == records.TABLE and key.startswith(records.DEDUPE):
            reads.append(key)
        return real_get(table, key)

    monkeypatch.setattr(store, "get_entity", counting)
    return reads


async def test_new_deliveries_read_no_dedupe_row_and_redeliveries_are_found(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    await harness.start()
    assert harness.store is not None
    tasks = TaskQueue(harness.store)
    await tasks.start()
    try:
        router = _router(harness, tasks)
        await router.sweep()  # as the daemon's first sweep, at start: the filter is built
        reads = _count_dedupe_reads(harness.store, monkeypatch)
        first = [await router.admit(_envelope(i), dedupe=("webhook", "hooks", f"d{i}"))
                 for i in range(20)]
        assert all(a.accepted and not a.duplicate for a in first)
        assert reads == []
        # The platform redelivers (same delivery id), or re-sends the message under a
        # new one: both are found, by a read.
        again = await router.admit(_envelope(3), dedupe=("webhook", "hooks", "d3"))
        resent = await router.admit(_envelope(4), dedupe=("webhook", "hooks", "new-id"))
        assert again.duplicate and again.envelope_id == first[3].envelope_id
        assert resent.duplicate and resent.envelope_id == first[4].envelope_id
        assert reads
        # A router started afresh builds its filter from the table; so does a sweep.
        for fresh in (_router(harness, tasks), router):
            await fresh.sweep()
            for i in (0, 7, 19):
                found = await fresh.admit(_envelope(i), dedupe=("webhook", "hooks", f"d{i}"))
                assert found.duplicate and found.envelope_id == first[i].envelope_id
        reads.clear()
        assert not (await router.admit(_envelope(99), dedupe=("webhook", "hooks", "d99"))
                    ).duplicate
        assert reads == []
    finally:
        await tasks.close()


async def test_on_a_shared_journal_every_dedupe_key_is_read(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where other daemons share the journal, their admissions reach this daemon's
    memory only through its watcher's delay, so no key is taken as absent unread."""
    await harness.start()
    assert harness.store is not None
    tasks = TaskQueue(harness.store)
    await tasks.start()
    try:
        config = ChannelsConfig(default=ChannelPolicy(dm_policy="allow", mentions=("*",)))
        admitter = Admitter(harness.store, tasks, PairingBook(harness.store), config,
                            lambda: time.time_ns() // 1_000_000, shared=True)
        reads = _count_dedupe_reads(harness.store, monkeypatch)
        admitted = await admitter.admit(_envelope(1), dedupe=("webhook", "hooks", "d1"))
        assert admitted.accepted and len(reads) == 2  # the delivery's key and the message's
    finally:
        await tasks.close()


BULK = 30_000
"""Dedupe rows put in the table at once: 30 pages of the filter's scan."""
BULK_ENVELOPE = "01J00000000000000000000000"


async def _bulk_dedupe_rows(store: JournalStore, count: int) -> list[str]:
    """``count`` unexpired dedupe rows, written directly (a table that large would take
    minutes to fill through admissions)."""
    now = time.time_ns() // 1_000_000
    row = records.encode(DedupeRec(envelope_id=BULK_ENVELOPE, task_id="",
                                   action="respond", reason="bulk", admitted_ms=now,
                                   expires_ms=now + 3_600_000))
    keys = [records.dedupe_key("webhook", "hooks", f"bulk-{i}") for i in range(count)]
    for start in range(0, count, 5000):
        await store.append([EventDraft(kind="test.bulk_dedupe", actor="test", payload={},
                                       entity_writes=tuple(EntityWrite(records.TABLE, k, row)
                                                           for k in keys[c:c + 1000]))
                            for c in range(start, min(start + 5000, count), 1000)])
    return keys


async def test_the_loop_serves_while_the_filter_is_built_over_a_large_table(
        harness: Harness) -> None:
    """The filter's build reads the whole dedupe table: a page at a time, with the loop
    serving between pages, not in one go that holds every ack and run behind it."""
    await harness.start()
    assert harness.store is not None
    tasks = TaskQueue(harness.store)
    await tasks.start()
    try:
        await _bulk_dedupe_rows(harness.store, BULK)
        router = _router(harness, tasks)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        beside = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        before = ticks
        await router.sweep()  # the sweep's scan, then the filter's two scans
        during = ticks - before
        beside.cancel()
        # The loop got a turn at least once per page of each of the filter's two scans.
        assert during >= 2 * BULK // 1000
        for i in (0, BULK // 2, BULK - 1):  # the rows are in the filter: found again
            found = await router.admit(_envelope(i), dedupe=("webhook", "hooks", f"bulk-{i}"))
            assert found.duplicate and found.envelope_id == BULK_ENVELOPE
    finally:
        await tasks.close()


async def test_keys_admitted_while_the_filter_is_built_are_kept_by_the_new_one(
        harness: Harness) -> None:
    """An admission that commits while the build's scan is past its key's place in the
    table is still in the filter that replaces the old one: its redelivery is a
    duplicate, not a second answer."""
    await harness.start()
    assert harness.store is not None
    tasks = TaskQueue(harness.store)
    await tasks.start()
    try:
        await _bulk_dedupe_rows(harness.store, BULK)
        router = _router(harness, tasks)
        await router.sweep()
        building = asyncio.ensure_future(router.sweep())
        admitted = []
        i = 0
        while not building.done():
            admitted.append((i, await router.admit(
                _envelope(i), dedupe=("webhook", "hooks", f"during-{i}"))))
            i += 1
        await building
        assert len(admitted) >= 5, "no admission landed during the build"
        for i, first in admitted:
            again = await router.admit(_envelope(i), dedupe=("webhook", "hooks", f"during-{i}"))
            assert again.duplicate and again.envelope_id == first.envelope_id
    finally:
        await tasks.close()
