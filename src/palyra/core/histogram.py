"""A cumulative histogram cheap enough to fill on a hot path (read by ``/metrics``).

One ``observe`` is a bisect and two additions on the observer's own thread; a
scrape copies the counts. No lock: a reader may see a count one observation
older than the sum, which a histogram scraped every few seconds does not notice.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

# Seconds: the OpenTelemetry GenAI duration buckets, extended down to the 100 µs
# an O_DSYNC frame write takes on an idle disk.
SECONDS_BUCKETS: tuple[float, ...] = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                      0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12)


class Histogram:
    """Counts per upper bound (the last slot is +Inf) and the sum of what was observed."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Count ``value`` in the first bucket whose bound is >= it."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value


