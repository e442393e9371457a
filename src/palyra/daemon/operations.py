"""The daemon's operations endpoints and its span follower (docs/operations.md).

``/metrics`` (Prometheus text, optionally behind a bearer token) and ``/readyz``
(200, or 503 with the failing checks) on the HTTP port; with ``[tracing]
enabled`` a task folds every committed event into GenAI spans for the OTLP
exporter.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Mapping
from typing import TYPE_CHECKING

import msgspec
import structlog

from palyra.app import PalyraApp
from palyra.config import PalyraConfig
from palyra.journal import JournalStore
from palyra.ops.metrics import CONTENT_TYPE, DaemonMetrics, MetricSources
from palyra.transport.http.app import PlainHandler
from palyra.transport.streams import OpenStreams

if TYPE_CHECKING:  # OpenTelemetry's SDK (about 6 MB resident) loads only with tracing on
    from palyra.ops.tracing import SpanSink

READY_PATH = "/readyz"
_log = structlog.get_logger("palyra.daemon")
_json = msgspec.json.Encoder()


def daemon_metrics(app: PalyraApp, config: PalyraConfig,
                   streams: OpenStreams) -> DaemonMetrics | None:
    """The metrics when ``[metrics] enabled`` (their drain task is the caller's to run)."""
    if not config.metrics.enabled:
        return None
    return DaemonMetrics(MetricSources(
        store=app.store, engine=app.engine, tasks=app.tasks, memory=app.memory,
        streams_open=streams.snapshot,
        models={config.provider.kind: config.provider.model or config.provider.kind}))


def plain_routes(app: PalyraApp, config: PalyraConfig,
                 metrics: DaemonMetrics | None) -> dict[str, PlainHandler]:
    """``/readyz`` always; the metrics path with ``metrics``."""
    routes: dict[str, PlainHandler] = {READY_PATH: _readyz(app)}
    if metrics is not None:
        routes[config.metrics.path] = _metrics(metrics, config.metrics.token)
    return routes


def _readyz(app: PalyraApp) -> PlainHandler:
    async def ready(headers: Mapping[str, str]) -> tuple[int, str, bytes]:
        checks = list(app.readiness()) if app.readiness else []
        failing = [f"{name}: {detail}" for name, ok, detail in checks if not ok]
        body = {"ready": not failing, "reason": "; ".join(failing),
                "checks": [{"name": n, "ok": ok, "detail": d} for n, ok, d in checks]}
        return (503 if failing else 200), "application/json", _json.encode(body)

    return ready


def _metrics(metrics: DaemonMetrics, token: str) -> PlainHandler:
    expected = f"Bearer {token}".encode()

    async def scrape(headers: Mapping[str, str]) -> tuple[int, str, bytes]:
        if token and not hmac.compare_digest(headers.get("authorization", "").encode(),
                                             expected):
            return 401, "text/plain; charset=utf-8", b"metrics need the configured bearer token\n"
        return 200, CONTENT_TYPE, metrics.scrape()

    return scrape


def start_tracing(tg: asyncio.TaskGroup, store: JournalStore,
                  config: PalyraConfig) -> tuple[asyncio.Task[None], SpanSink] | None:
    """With ``[tracing] enabled``: the follower task and its sink (shut down at drain)."""
    if not config.tracing.enabled:
        return None
    from palyra.ops.tracing import otlp_sink, trace_journal

    sink = otlp_sink(config.tracing)
    task = tg.create_task(trace_journal(store, sink, store.head().count), name="tracing")
    _log.info("tracing", endpoint=config.tracing.otlp_endpoint or "(none: spans dropped)",
              sample_ratio=config.tracing.sample_ratio)
    return task, sink
