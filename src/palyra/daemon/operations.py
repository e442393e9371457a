"""The daemon's operations endpoints and its tracing exporter process (docs/operations.md).

``/metrics`` (Prometheus text, optionally behind a bearer token) and ``/readyz``
(200, or 503 with the failing checks) on the HTTP port; with ``[tracing]
enabled`` an exporter process beside the daemon folds every committed event
into GenAI spans for the OTLP exporter.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

import msgspec
import structlog

from palyra.app import PalyraApp
from palyra.config import PalyraConfig
from palyra.ops.metrics import CONTENT_TYPE, DaemonMetrics, MetricSources
from palyra.ops.trace_process import TraceExporterProcess
from palyra.transport.http.app import PlainHandler
from palyra.transport.streams import OpenStreams

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
        streams_open=streams.snapshot, channels=app.channels,
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


def tracing_process(config: PalyraConfig) -> TraceExporterProcess | None:
    """With ``[tracing] enabled``: the exporter process, not started yet (the caller starts
    it at the journal head it opened and stops it once the journal is closed)."""
    if not config.tracing.enabled:
        return None
    _log.info("tracing", endpoint=config.tracing.otlp_endpoint or "(none: spans dropped)",
              sample_ratio=config.tracing.sample_ratio)
    return TraceExporterProcess(config.data_dir, config.tracing)
