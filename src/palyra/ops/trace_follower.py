"""Spans from the journal as it grows, read back from the store (not from the writer).

:class:`StoreFollower` pages through the events committed after a position,
folds them into GenAI spans (:class:`~palyra.ops.spans.SpanFold`) and hands
them to a :class:`~palyra.ops.tracing.SpanSink`. It needs nothing of the
process that writes the journal, so it runs in the exporter process
(:mod:`palyra.ops.trace_exporter`) on a read-only store: building the SDK's
spans and encoding them as OTLP costs the daemon nothing. Memory stays bounded:
one page of events at a time, and the fold's own bound on open runs.
"""

from __future__ import annotations

from palyra.journal import JournalStore
from palyra.ops.spans import SpanFold, SpanRecord
from palyra.ops.tracing import SpanSink

PAGE = 1000


class StoreFollower:
    """Every event after ``after`` folded into spans, each event once, in journal order."""

    def __init__(self, store: JournalStore, sink: SpanSink, after: int,
                 fold: SpanFold | None = None) -> None:
        self._store = store
        self._sink = sink
        self._fold = fold or SpanFold()
        self.after = after

    def poll(self, max_pages: int = 100) -> int:
        """Fold what was committed since the last poll (at most ``max_pages`` pages, the
        rest at the next poll); returns how many events were read."""
        read = 0
        for _ in range(max_pages):
            events = self._store.read_range(self.after, PAGE)
            if not events:
                break
            spans: list[SpanRecord] = []
            feed = self._fold.feed
            for event in events:
                spans += feed(event)
            self.after = events[-1].position
            read += len(events)
            if spans:
                self._sink.emit(spans)
            if len(events) < PAGE:
                break
        return read
