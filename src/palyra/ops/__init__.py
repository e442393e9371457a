"""Operations: Prometheus metrics, OpenTelemetry GenAI spans, readiness and ``palyra doctor``.

Everything here reads what the application already committed or holds (the
journal's events, its counters, the engine's live state): the request path does
no extra work for it. See ``docs/operations.md``.
"""

from palyra.ops.config import MetricsConfig, TracingConfig

__all__ = ["MetricsConfig", "TracingConfig"]
