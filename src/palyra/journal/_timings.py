"""What each durable commit took, filled by the writer as it commits (read by ``/metrics``)."""

from __future__ import annotations

from palyra.core.histogram import SECONDS_BUCKETS, Histogram

# Events per commit: powers of two up to the writer's default batch bound.
BATCH_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

class CommitTimings:
    """What each durable commit took: the whole commit, its frame write, its size."""

    __slots__ = ("batch_events", "commit_seconds", "failures", "last_failure", "write_seconds")

    def __init__(self) -> None:
        self.commit_seconds = Histogram(SECONDS_BUCKETS)
        self.write_seconds = Histogram(SECONDS_BUCKETS)
        self.batch_events = Histogram(BATCH_BUCKETS)
        self.failures = 0
        self.last_failure = ""
