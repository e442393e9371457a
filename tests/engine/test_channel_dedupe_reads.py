"""Admitting a new delivery reads no dedupe row; a redelivery is still found.

Each dedupe look-up is an LMDB read on the loop's thread, and nearly every delivery
is new: the router keeps a filter of the keys the table may hold and reads only those.
"""

from __future__ import annotations

import time

import pytest
from engine_harness import Harness

from palyra.channels import ChannelRouter, ChannelsConfig, Envelope, PairingBook, records
from palyra.channels.admission import Admitter
from palyra.channels.config import ChannelPolicy
from palyra.journal import JournalStore
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
            if fresh is router:
                await router.sweep()
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
