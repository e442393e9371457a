"""The writer's counters and what each durable commit took (read by ``stats()`` and ``/metrics``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter

from palyra.core.errors import ErrorCode, PalyraError
from palyra.core.histogram import SECONDS_BUCKETS, Histogram
from palyra.journal.write.requests import Append, Request

_ERROR = attrgetter("error")

# Events per commit: powers of two up to the writer's default batch bound.
BATCH_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class CommitTimings:
    """What each durable commit took: the whole commit, its size, and the last failure.

    Filled by the writer and by its log thread (a frame written there is counted
    there), one at a time: :meth:`observe` holds ``lock``, which the writer's counters
    share (``Writer._answer`` counts both in one hold, :meth:`observe_held`), so no
    increment of one thread overwrites the other's.
    """

    __slots__ = ("batch_events", "commit_seconds", "failures", "last_failure", "lock")

    def __init__(self) -> None:
        self.commit_seconds = Histogram(SECONDS_BUCKETS)
        self.batch_events = Histogram(BATCH_BUCKETS)
        self.failures = 0
        self.last_failure = ""
        self.lock = threading.Lock()

    def observe(self, began: float, batch: Sequence[Request], events: int | None = None) -> None:
        """Count one commit of ``batch`` that began at ``began`` (``perf_counter``).

        ``events`` is how many events the commit appended, when the caller knows
        it (the LMDB writer does: no walk over the batch per commit); None counts
        them here. A request answered ``UNAVAILABLE`` means its commit failed
        (``answer.fail``); any other error (a taken event id) failed that caller alone.
        """
        took = time.perf_counter() - began
        with self.lock:
            self.observe_held(took, batch, events)

    def observe_held(self, took: float, batch: Sequence[Request], events: int | None) -> None:
        """:meth:`observe` of a commit that took ``took`` seconds, ``lock`` held by the
        caller (the writer counts its own counters in the same hold: one per commit)."""
        self.commit_seconds.observe(took)
        if any(map(_ERROR, batch)):  # rare: one loop in C finds there is none
            events = self._failure_or_events(batch)
            if events is None:
                return
        elif events is None:
            events = sum(len(r.events) for r in batch if isinstance(r, Append))
        self.batch_events.observe(events)
        self.last_failure = ""

    def _failure_or_events(self, batch: Sequence[Request]) -> int | None:
        """None after counting a failed commit; else the events of the requests that succeeded."""
        events = 0
        for request in batch:
            error = request.error
            if error is None:
                if isinstance(request, Append):
                    events += len(request.events)
            elif isinstance(error, PalyraError) and error.code is ErrorCode.UNAVAILABLE:
                self.failures += 1
                self.last_failure = str(error.__cause__ or error)
                return None
        return events


@dataclass(slots=True)
class WriterStats:
    """Mutable counters, read by :meth:`JournalStore.stats`.

    The LMDB writer and its log thread both count commits, each under the timings'
    lock (``CommitTimings.lock``). A reader takes them as they are: each is one int.
    """

    commits: int = 0
    appended_events: int = 0
    appended_bytes: int = 0
    append_calls: int = 0
    max_batch_calls: int = 0
    records: int = 0
    timings: CommitTimings = field(default_factory=CommitTimings)
