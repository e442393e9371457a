"""The metrics fold in process: live buffer or store read after an overflow, same counts."""

from __future__ import annotations

from palyra.app import PalyraApp
from palyra.journal import JournalStore
from palyra.ops.event_metrics import ASKED, DECIDED, DECISIONS, STEPS, TOOL_CALLS
from palyra.ops.metrics import DaemonMetrics, MetricSources

from .helpers import run_with_approvals


async def test_an_overflowed_live_buffer_falls_back_to_the_store(
        app: tuple[PalyraApp, JournalStore]) -> None:
    palyra, store = app
    await run_with_approvals(palyra, steps=1, key="before")  # not counted: before the metrics
    live = DaemonMetrics(MetricSources(store=store, engine=palyra.engine))
    overflowing = DaemonMetrics(MetricSources(store=store, engine=palyra.engine))
    overflowing._tail._live.max_events = 4  # a drain that comes too late: the buffer is dropped
    started = store.head().count
    await run_with_approvals(palyra, steps=3)
    assert overflowing._tail.overflowed and not live._tail.overflowed
    folded = live.catch_up(), overflowing.catch_up()
    assert folded[0] == folded[1] == store.head().count - started > 20
    for family, labels in ((STEPS, ()), (TOOL_CALLS, ("add", "ok")), (ASKED, ()),
                           (DECIDED, ("approved",)), (DECISIONS, ("needs_approval",))):
        assert live.events.count(family, *labels) == overflowing.events.count(family, *labels)
    assert live.events.count(TOOL_CALLS, "add", "ok") == 3
    text = live.scrape().decode()
    assert 'palyra_tool_calls_total{outcome="ok",tool="add"} 3.0' in text
    assert live.catch_up() == 0  # nothing new: nothing folded twice

