"""The Prometheus side of the daemon's metrics: its registry, its families, its text.

Imported by :meth:`palyra.ops.metrics.DaemonMetrics.scrape` at the first scrape, so
prometheus_client loads only in a daemon that is scraped. The live gauges (runs by
state, approvals pending, the journal's own counters and commit histograms, map use,
open streams, queue depths, memory, channels) are read from the objects that already
hold them; the folded counters come from :class:`~palyra.ops.event_metrics.EventMetrics`.
"""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from palyra.channels import ChannelRouter
from palyra.core.histogram import Histogram
from palyra.engine import Engine
from palyra.memory.service import Memory
from palyra.ops.event_metrics import EventMetrics, cumulative_buckets
from palyra.ops.sources import MetricSources


def registry(sources: MetricSources, events: EventMetrics, lock: threading.Lock,
             quarantine: Mapping[str, int]) -> CollectorRegistry:
    """One daemon's registry (no process-global state: tests run many daemons)."""
    built = CollectorRegistry(auto_describe=False)
    built.register(_LiveCollector(sources, events, lock, quarantine))
    return built


def render(built: CollectorRegistry) -> bytes:
    """The Prometheus text exposition of ``built``."""
    return generate_latest(built)


class _LiveCollector(Collector):
    def __init__(self, sources: MetricSources, events: EventMetrics, lock: threading.Lock,
                 quarantine: Mapping[str, int]) -> None:
        self._s = sources
        self._events = events
        self._lock = lock
        self._quarantine = quarantine

    def describe(self) -> list[Metric]:
        return []  # families depend on what is configured: collected, not described

    def collect(self) -> Iterator[Metric]:
        with self._lock:  # the fold's families built whole while no commit folds
            folded, quarantined = list(self._events.collect()), self._events.quarantined()
        yield from folded
        yield from self._journal()
        if self._s.engine is not None:
            yield from self._runs(self._s.engine)
        if self._s.streams_open is not None:
            streams = GaugeMetricFamily("palyra_streams_open", "Open server streams.",
                                        labels=["transport"])
            for transport, count in sorted(self._s.streams_open().items()):
                streams.add_metric([transport], count)
            yield streams
        if self._s.tasks is not None:
            depth = GaugeMetricFamily("palyra_tasks_queued", "Unfinished background tasks by "
                                      "kind and state.", labels=["kind", "state"])
            for (kind, state), count in sorted(self._s.tasks.depth().items()):
                depth.add_metric([kind, state], count)
            yield depth
            yield CounterMetricFamily("palyra_task_stale_epoch_refusals",
                                      "Task updates refused for a stale lease epoch.",
                                      value=self._s.tasks.stale_refusals)
        if self._s.memory is not None:
            yield from self._memory(self._s.memory)
        if self._s.channels is not None:
            yield from self._channels(self._s.channels, quarantined)

    def _channels(self, router: ChannelRouter, quarantined: Mapping[str, float]
                  ) -> Iterator[Metric]:
        counters = router.counters
        duplicates = CounterMetricFamily(
            "palyra_channel_duplicates", "Channel redeliveries answered from the dedupe record "
            "(nothing journaled).", labels=["channel"])
        for channel, count in sorted(counters.duplicates.items()):
            duplicates.add_metric([channel], count)
        yield duplicates
        refused = CounterMetricFamily(
            "palyra_channel_signature_failures", "Channel deliveries refused for their "
            "signature or timestamp (nothing journaled).", labels=["channel", "reason"])
        for (channel, reason), count in sorted(counters.signature_failures.items()):
            refused.add_metric([channel, reason], count)
        yield refused
        sizes = Tally(self._quarantine)
        sizes.update(quarantined)
        quarantine = GaugeMetricFamily("palyra_channel_quarantine_size", "Messages in the "
                                       "quarantine, per channel.", labels=["channel"])
        for channel, count in sorted(sizes.items()):
            quarantine.add_metric([channel], count)
        yield quarantine

    def _journal(self) -> Iterator[Metric]:
        store = self._s.store
        stats = store.stats()
        for name, text, value in (
                ("palyra_journal_appends", "append calls acknowledged", stats.append_calls),
                ("palyra_journal_events", "events committed", stats.appended_events),
                ("palyra_journal_commits", "durable commits", stats.commits),
                ("palyra_journal_bytes", "record bytes committed", stats.appended_bytes),
                ("palyra_journal_map_grows", "times the LMDB map doubled", stats.map_grows)):
            yield CounterMetricFamily(name, f"Journal {text} since start.", value=value)
        yield GaugeMetricFamily("palyra_journal_map_size_bytes", "LMDB map size.",
                                value=stats.map_size)
        yield GaugeMetricFamily("palyra_journal_map_used_bytes", "LMDB map bytes in use.",
                                value=store.map_used())
        timings, writes = store.commit_timings()
        if timings is not None:
            yield _histogram("palyra_journal_commit_seconds", "Durable commit latency "
                             "(the writer's whole commit).", timings.commit_seconds)
            yield _histogram("palyra_journal_commit_batch_events", "Events per durable commit.",
                             timings.batch_events)
            yield CounterMetricFamily("palyra_journal_commit_failures", "Commits that failed.",
                                      value=timings.failures)
        if writes is not None:
            yield _histogram("palyra_journal_fsync_seconds", "Commit-log frame write "
                             "(O_DSYNC: the write and its flush).", writes)

    @staticmethod
    def _runs(engine: Engine) -> Iterator[Metric]:
        live = engine.live_runs()
        by_state = Tally(str(record.state) for record, _phase in live)
        runs = GaugeMetricFamily("palyra_runs", "Live runs of this daemon by state.",
                                 labels=["state"])
        for state, count in sorted(by_state.items()):
            runs.add_metric([state], count)
        yield runs
        phases = GaugeMetricFamily("palyra_run_phase", "Live runs by what their step is doing.",
                                   labels=["phase"])
        for phase, count in sorted(Tally(phase for _record, phase in live).items()):
            phases.add_metric([phase], count)
        yield phases
        yield GaugeMetricFamily("palyra_approvals_pending", "Runs waiting for an approval.",
                                value=by_state.get("waiting_for_approval", 0))

    @staticmethod
    def _memory(memory: Memory) -> Iterator[Metric]:
        status = memory.status()
        yield GaugeMetricFamily("palyra_memory_items", "Memory items indexed.",
                                value=memory.item_count)
        yield GaugeMetricFamily("palyra_memory_embed_backlog", "Items still without a vector.",
                                value=status.pending)
        yield _histogram("palyra_memory_search_seconds", "Memory search latency.",
                         memory.search_seconds)


def _histogram(name: str, text: str, source: Histogram) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, text, buckets=cumulative_buckets(source),
                                 sum_value=source.sum)
