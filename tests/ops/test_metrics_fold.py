"""The metrics fold in process: every commit folded once, as it is delivered.

The oracle is the same fold over the store read back after the fact: the live
counts (fed the writer's own event objects, commit by commit) must equal it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from palyra.app import PalyraApp
from palyra.journal import JournalStore, StoredEvent
from palyra.ops.event_metrics import (
    ASKED,
    DECIDED,
    DECISIONS,
    MEMORY,
    STEPS,
    TASKS,
    TOOL_CALLS,
    EventMetrics,
)
from palyra.ops.metrics import DaemonMetrics, MetricSources

from .helpers import run_with_approvals


async def _delivered(store: JournalStore, metrics: DaemonMetrics, started: int) -> None:
    for _ in range(1000):  # the last commit's delivery is a loop callback away
        if metrics.folded >= store.head().count - started:
            return
        await asyncio.sleep(0.01)


class _Threads(DaemonMetrics):
    """The daemon's metrics, remembering which threads folded."""

    def __init__(self, sources: MetricSources) -> None:
        self.threads: set[int] = set()
        super().__init__(sources)

    def _fold(self, pairs: Sequence[tuple[StoredEvent, int]]) -> None:
        self.threads.add(threading.get_ident())
        super()._fold(pairs)


async def test_every_commit_is_folded_once_as_the_store_holds_it(
        app: tuple[PalyraApp, JournalStore]) -> None:
    palyra, store = app
    await run_with_approvals(palyra, steps=1, key="before")  # not counted: before the metrics
    metrics = _Threads(MetricSources(store=store, engine=palyra.engine))
    started = store.head().count
    await run_with_approvals(palyra, steps=3)
    await _delivered(store, metrics, started)
    assert metrics.folded == store.head().count - started > 20
    # Folded by the writer, where the events were built: no hop to the event loop.
    assert metrics.threads and threading.get_ident() not in metrics.threads
    oracle = EventMetrics({})
    for event in store.read_range(started, 10_000):
        oracle.feed(event)
    for family, labels in ((STEPS, ()), (TOOL_CALLS, ("add", "ok")), (ASKED, ()),
                           (DECIDED, ("approved",)), (DECISIONS, ("needs_approval",))):
        assert metrics.events.count(family, *labels) == oracle.count(family, *labels), family
    assert metrics.events.count(TOOL_CALLS, "add", "ok") == 3
    text = metrics.scrape().decode()
    assert 'palyra_tool_calls_total{outcome="ok",tool="add"} 3.0' in text
    metrics.close()  # nothing folded after close
    await run_with_approvals(palyra, steps=1, key="after")
    await asyncio.sleep(0.05)
    assert metrics.events.count(TOOL_CALLS, "add", "ok") == 3
    assert metrics.fold_errors == 0


@dataclass
class _Event:
    position: int
    kind: str
    payload: dict[str, Any] = field(default_factory=dict)
    session_id: str = "s"
    run_id: str = "r"
    ts_ms: int = 0


async def test_an_event_that_breaks_the_fold_is_skipped_and_the_rest_of_its_commit_counts(
        app: tuple[PalyraApp, JournalStore]) -> None:
    _palyra, store = app
    metrics = DaemonMetrics(MetricSources(store=store))
    proposed = _Event(1, "tape.tool_proposal", {"toolName": "add", "proposalId": "p1", "decision": {
        "outcome": "TOOL_DECISION_OUTCOME_ALLOW"}})
    broken = _Event(2, "tape.tool_proposal", {"decision": "not an object"})
    done = _Event(3, "tape.tool_result", {"proposalId": "p1", "success": True})
    queued = _Event(4, "task.enqueued", {"kind": "send"})
    embed = _Event(5, "task.enqueued", {"kind": "embed"})  # the same kind's handler again
    stored = _Event(6, "memory.ingested")
    other = _Event(7, "tape.user_message", {"text": "not counted"})
    # One commit as the store delivers it (the fold's consumer, called directly).
    metrics._fold([(e, 10) for e in (proposed, broken, done, queued, embed, stored,  # type: ignore[misc]
                                      other, stored)])
    assert metrics.fold_errors == 1 and metrics.folded == 8
    assert metrics.events.count(DECISIONS, "allow") == 1
    assert metrics.events.count(TOOL_CALLS, "add", "ok") == 1
    assert metrics.events.count(TASKS, "send", "enqueued") == 1
    assert metrics.events.count(TASKS, "embed", "enqueued") == 1
    assert metrics.events.count(MEMORY, "ingested") == 2
    metrics.close()


async def test_a_task_born_claimed_counts_as_enqueued_and_claimed(
        app: tuple[PalyraApp, JournalStore]) -> None:
    _palyra, store = app
    metrics = DaemonMetrics(MetricSources(store=store))
    # One event for both moves (docs/journal/format.md, "Task events"); an older
    # journal's two events count the same.
    born = _Event(1, "task.enqueued", {"kind": "send", "state": "running"})
    queued = _Event(2, "task.enqueued", {"kind": "send", "state": "queued"})
    claimed = _Event(3, "task.claimed", {"kind": "send", "state": "running"})
    metrics._fold([(e, 10) for e in (born, queued, claimed)])  # type: ignore[misc]
    assert metrics.events.count(TASKS, "send", "enqueued") == 2
    assert metrics.events.count(TASKS, "send", "claimed") == 2
    metrics.close()
