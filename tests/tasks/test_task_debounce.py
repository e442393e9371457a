"""Debounce and batching per key: nothing lost, nothing duplicated, order kept, no item waits
past the maximum, no batch over its cap (property test over a real queue and a fake clock)."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palyra.journal import JournalConfig, JournalStore
from palyra.tasks import Debounce, State, TaskQueue


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.ms


_steps = st.lists(st.tuples(st.integers(0, 3000), st.booleans()), min_size=1, max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=_steps, quiet=st.integers(1, 1000), max_wait=st.integers(1, 4000),
       cap=st.integers(0, 4))
def test_debounce_keeps_every_item_once_in_order_within_the_max_wait(
        steps: list[tuple[int, bool]], quiet: int, max_wait: int, cap: int) -> None:
    asyncio.run(_scenario(steps, quiet, max_wait, cap))


async def _scenario(steps: list[tuple[int, bool]], quiet: int, max_wait: int, cap: int) -> None:
    rule = Debounce("chat:c1", quiet, max_wait, cap)
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        store = JournalStore.open(Path(tmp) / "data", config=JournalConfig(sync=False))
        queue = TaskQueue(store, now_ms=clock)
        await queue.start()
        try:
            first_seen: dict[int, int] = {}
            claimed: list[tuple[list[int], int]] = []  # (items, claimed at)
            for i, (gap, drain) in enumerate(steps):
                clock.ms += gap
                await _claim_due(queue, clock, claimed)
                first_seen[i] = clock.ms
                await queue.enqueue("digest", payload={"i": i}, debounce=rule)
                if drain:
                    await _claim_due(queue, clock, claimed)
            clock.ms += max_wait + 1  # everything is due by now
            await _claim_due(queue, clock, claimed)
            items = [i for batch, _ in claimed for i in batch]
            assert items == list(range(len(steps)))  # none lost, none twice, in order
            for batch, _at in claimed:
                assert not cap or len(batch) <= cap
            # Every task was due no later than max_wait after its first item.
            tasks = queue.page(limit=500)[0]
            assert all(t.not_before_ms <= t.created_ms + max_wait for t in tasks)
            assert all(t.created_ms == first_seen[msgspec.json.decode(t.payload_json)
                                                  ["items"][0]["i"]] for t in tasks)
            assert all(t.state != State.QUEUED for t in tasks)
        finally:
            await queue.close()
            store.close()


async def _claim_due(queue: TaskQueue, clock: Clock, claimed: list[tuple[list[int], int]]) -> None:
    while True:
        ready = [t for t in queue.page(state="queued", limit=500)[0] if t.not_before_ms <= clock.ms]
        if not ready:
            return
        task = await asyncio.wait_for(queue.claim("w"), 1)
        items = [item["i"] for item in msgspec.json.decode(task.payload_json)["items"]]
        claimed.append((items, clock.ms))
        await queue.succeed(task.task_id, task.lease_epoch)
