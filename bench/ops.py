"""``--ops``: the tool-loop bench with metrics and tracing on, beside the same run with them off.

``metrics``: the daemon's :class:`~palyra.ops.metrics.DaemonMetrics` on the
measured store and engine, drained as in the daemon and scraped every ``SCRAPE_EVERY_S`` (15 times more often
than Prometheus' default 15 s, so the fold's cost shows). ``tracing``: the span
follower at 100 % sampling into the SDK's ``BatchSpanProcessor``, whose exporter
encodes every batch as OTLP protobuf (the OTLP/HTTP exporter's own encoder) and
drops the bytes: all of tracing's CPU but the HTTP request to a collector.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from bench.inproc import InProcessDriver
from palyra.ops.metrics import DaemonMetrics, MetricSources
from palyra.ops.tracing import SpanSink, trace_journal

MODES = ("off", "metrics", "tracing")
SCRAPE_EVERY_S = 1.0


class EncodeOnly(SpanExporter):
    """Encodes each batch as the OTLP/HTTP exporter would, then drops it."""

    def __init__(self) -> None:
        self.spans = 0
        self.bytes = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.bytes += len(encode_spans(spans).SerializeToString())
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


@contextlib.asynccontextmanager
async def operations(driver: InProcessDriver, mode: str) -> AsyncIterator[dict[str, int]]:
    """Run ``mode``'s instrumentation around the measured phase; yields its counters."""
    counters: dict[str, int] = {}
    if mode == "off":
        yield counters
        return
    if mode == "metrics":
        metrics = DaemonMetrics(MetricSources(store=driver.store, engine=driver.app.engine,
                                              models={"scripted": "scripted"}))

        async def scrape_every() -> None:
            while True:
                await asyncio.sleep(SCRAPE_EVERY_S)
                counters["scrape_bytes"] = len(metrics.scrape())
                counters["scrapes"] = counters.get("scrapes", 0) + 1

        tasks = [asyncio.create_task(scrape_every()), asyncio.create_task(metrics.drain_every())]
        try:
            yield counters
        finally:
            for task in tasks:
                task.cancel()
            counters["scrape_bytes"] = len(metrics.scrape())  # what was left is folded too
            metrics.close()
        return
    exporter = EncodeOnly()
    sink = SpanSink(BatchSpanProcessor(exporter))
    task = asyncio.create_task(trace_journal(driver.store, sink, driver.store.head().count))
    try:
        yield counters
    finally:
        task.cancel()
        await asyncio.to_thread(sink.shutdown)
        counters.update(spans=exporter.spans, otlp_bytes=exporter.bytes, emitted=sink.emitted)
