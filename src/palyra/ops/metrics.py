"""The Prometheus exposition: journal-derived metrics plus live gauges.

Each durable commit's events are folded (:class:`~palyra.ops.event_metrics.EventMetrics`,
a dict update per event) on the thread that committed them, in the writer's own
wake-up (:meth:`~palyra.journal.JournalStore.tap_commits`): the writer's event
objects while they are still in that core's cache, nothing buffered, no store
read, no hop to the event loop. A lock keeps the fold and a scrape apart (the
writer and, on PostgreSQL, the thread that watches other daemons' commits both
fold). A scrape renders the registry; the live gauges (runs by state, approvals
pending, the journal's own counters and commit histograms, map use, open streams,
queue depths, memory, channels) are read from the objects that already hold them.
Nothing is counted on the request path.

prometheus_client (its exposition pulls in ``http.server``, ``wsgiref`` and more: about
1.8 MiB resident) is imported at the first scrape (``palyra.ops.exposition``), not at
start: a daemon nobody scrapes never loads it, and the fold does not need it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog

from palyra.journal import StoredEvent
from palyra.ops.event_metrics import EventMetrics
from palyra.ops.sources import MetricSources
from palyra.ops.spans import EventLike

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_log = structlog.get_logger("palyra.ops")

__all__ = ["CONTENT_TYPE", "DaemonMetrics", "MetricSources"]


class DaemonMetrics:
    """One registry per daemon (no process-global state: tests run many daemons)."""

    def __init__(self, sources: MetricSources) -> None:
        self._registry: CollectorRegistry | None = None  # built at the first scrape
        self._sources = sources
        self.events = EventMetrics(sources.models)
        self.folded = 0
        self.fold_errors = 0
        # Held by each fold (a committing thread) and by a scrape's read of the fold.
        self._lock = threading.Lock()
        # Counters start now, with this daemon: every commit from here on is folded
        # on the thread that commits it, before it is answered.
        self._tap = sources.store.tap_commits(self._fold)
        # The quarantine only grows: its size is what it held now plus what the fold
        # sees quarantined from here on (no scan per scrape).
        self._quarantine = sources.channels.quarantine_sizes() if sources.channels else {}

    def _fold(self, pairs: Sequence[tuple[StoredEvent, int]]) -> None:
        """Fold one commit's events (the committing thread, before the commit is answered)."""
        with self._lock:
            self.events.feed_all([event for event, _size in pairs], self._failed)
            self.folded += len(pairs)

    def _failed(self, event: EventLike) -> None:
        """A fold bug costs the event it broke on, never the commit or the other events."""
        self.fold_errors += 1
        if self.fold_errors == 1:
            _log.exception("metrics_fold_failed", kind=event.kind, position=event.position)

    def close(self) -> None:
        """Stop folding (the store's close ends it too)."""
        self._sources.store.untap(self._tap)

    def scrape(self) -> bytes:
        """The Prometheus text exposition, current to the last commit answered."""
        from palyra.ops import exposition  # prometheus_client, at the first scrape

        if self._registry is None:
            self._registry = exposition.registry(self._sources, self.events, self._lock,
                                                 self._quarantine)
        return exposition.render(self._registry)
