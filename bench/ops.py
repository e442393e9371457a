"""``--ops``: the tool-loop bench with metrics and tracing on, beside the same run with them off.

``metrics``: the daemon's :class:`~palyra.ops.metrics.DaemonMetrics` on the
measured store and engine (every commit folded as it is delivered, as in the daemon),
scraped every ``SCRAPE_EVERY_S`` (15 times more often than Prometheus' default 15 s,
so the scrape's cost shows). ``tracing``: the
daemon's exporter process (:mod:`palyra.ops.trace_exporter`) at 100 % sampling
on the measured journal, sending OTLP/HTTP protobuf to a loopback collector
(:mod:`bench.otlp_sink`). The measured process's CPU is the daemon's; the
exporter's own CPU over the measured phase is reported beside it
(``exporter_cpu_s``), since on a machine with no spare core it would slow the
daemon too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import sys
import time
from collections.abc import AsyncIterator, Sequence

from bench.inproc import InProcessDriver
from palyra.journal import JournalStore, StoredEvent
from palyra.ops.config import TracingConfig
from palyra.ops.event_metrics import EventMetrics
from palyra.ops.metrics import DaemonMetrics, MetricSources
from palyra.ops.trace_process import TraceExporterProcess

MODES = ("off", "metrics", "tracing")
SCRAPE_EVERY_S = 1.0
SETTLE_S = 1.5  # before every measured phase; the exporter's imports are done by then


class ClockedMetrics(DaemonMetrics):
    """The daemon's metrics, each fold and scrape clocked inside the run.

    The fold runs on the journal writer's thread (a commit tap), a scrape on the
    event loop's; ``thread_time`` is per thread, so around each it counts that
    work alone, in place (caches as the run leaves them), whatever else the host
    runs: the figure a loaded machine's end-to-end noise cannot hide. Each
    window also holds about one clock read (0.6 µs on a quiet host, 2.9 µs under
    load: a system call, not in the vDSO).
    """

    fold_s = 0.0
    scrape_s = 0.0

    def _fold(self, pairs: Sequence[tuple[StoredEvent, int]]) -> None:
        began = time.thread_time()
        super()._fold(pairs)
        self.fold_s += time.thread_time() - began

    def scrape(self) -> bytes:
        began = time.thread_time()
        text = super().scrape()
        self.scrape_s += time.thread_time() - began
        return text


def direct_cost(store: JournalStore, after: int, metrics: DaemonMetrics) -> dict[str, float]:
    """What metrics cost by themselves, timed apart from the run (best of 5, so a loaded
    host's noise does not hide or inflate it): one fold of every event the measured
    phase committed (payloads already decoded, as the writer's own events are), and
    one scrape of the registry as it ended."""
    events: list[StoredEvent] = []
    while page := store.read_range(events[-1].position if events else after, 1000):
        events += page  # every event of the phase: a read returns at most 1,000
    for event in events:
        event.payload  # noqa: B018 (decoded once, as the writer's events come)
    fold_s = scrape_s = float("inf")
    for _ in range(5):
        fold = EventMetrics({"scripted": "scripted"})
        began = time.thread_time()
        fold.feed_all(events, print)  # as DaemonMetrics folds a commit (here: all at once)
        fold_s = min(fold_s, time.thread_time() - began)
        began = time.thread_time()
        metrics.scrape()
        scrape_s = min(scrape_s, time.thread_time() - began)
    return {"fold_us_per_event": round(fold_s / max(len(events), 1) * 1e6, 3),
            "events": len(events), "scrape_ms": round(scrape_s * 1000, 3)}


@contextlib.asynccontextmanager
async def collector() -> AsyncIterator[tuple[int, dict[str, int]]]:
    """A loopback OTLP sink process; yields its port and, once it stopped, what it took."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.otlp_sink", stdout=asyncio.subprocess.PIPE)
    assert process.stdout is not None
    seen: dict[str, int] = {}
    try:
        port = int(await process.stdout.readline())
        yield port, seen
    finally:
        process.terminate()
        with contextlib.suppress(ValueError):
            seen.update(json.loads(await process.stdout.readline() or b"{}"))
        await process.wait()


@contextlib.asynccontextmanager
async def operations(driver: InProcessDriver, mode: str) -> AsyncIterator[dict[str, float]]:
    """Run ``mode``'s instrumentation around the measured phase; yields its counters."""
    counters: dict[str, float] = {}
    # Every mode starts its measured phase after the same pause (the exporter's imports
    # need one; without it in every mode the others would start right on the previous
    # run's heels, and pay for its write-back in their figures).
    if mode != "tracing":
        await asyncio.sleep(SETTLE_S)
    if mode == "off":
        yield counters
        return
    if mode == "metrics":
        metrics = ClockedMetrics(MetricSources(store=driver.store, engine=driver.app.engine,
                                              models={"scripted": "scripted"}))
        after = driver.store.head().count

        async def scrape_every() -> None:
            while True:
                await asyncio.sleep(SCRAPE_EVERY_S)
                counters["scrape_bytes"] = len(metrics.scrape())
                counters["scrapes"] = counters.get("scrapes", 0) + 1

        scraper = asyncio.create_task(scrape_every())
        try:
            yield counters
        finally:
            scraper.cancel()
            # In the run: every fold, and the scrapes taken while it ran (not the last).
            counters["in_run_fold_ms"] = round(metrics.fold_s * 1000, 3)
            counters["in_run_scrape_ms"] = round(metrics.scrape_s * 1000, 3)
            counters["scrape_bytes"] = len(metrics.scrape())
            counters.update(direct_cost(driver.store, after, metrics))
            metrics.close()
        return
    async with collector() as (port, seen):
        tracer = TraceExporterProcess(driver.store.data_dir, TracingConfig(
            enabled=True, otlp_endpoint=f"http://127.0.0.1:{port}/v1/traces"))
        await tracer.start(driver.store.head().count)
        await asyncio.sleep(SETTLE_S)
        cpu_before = tracer.cpu_seconds()
        try:
            yield counters
        finally:
            # Its whole CPU once reaped (the last read and flush included), less the warm-up.
            reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
            counters["exporter_exit"] = await tracer.stop() or 0
            ended = resource.getrusage(resource.RUSAGE_CHILDREN)
            lifetime = ended.ru_utime + ended.ru_stime - reaped.ru_utime - reaped.ru_stime
            counters["exporter_cpu_ms"] = round((lifetime - cpu_before) * 1000, 1)
    counters.update(otlp_requests=seen.get("requests", 0), otlp_bytes=seen.get("bytes", 0))
