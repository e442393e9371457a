"""Operations settings: ``[metrics]`` and ``[tracing]`` in TOML, ``PALYRA_METRICS_*`` /
``PALYRA_TRACING_*`` in the env (docs/operations.md)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class MetricsConfig:
    """The Prometheus endpoint on the HTTP port.

    Attributes:
        enabled: Serve ``path`` (on by default: it costs nothing until scraped).
        path: Where the exposition is served.
        token: When set, a scrape must send ``Authorization: Bearer <token>``
            (Prometheus' ``authorization`` block); empty leaves it open on the
            HTTP port (loopback by default).
    """

    enabled: bool = True
    path: str = "/metrics"
    token: str = ""

    def __post_init__(self) -> None:
        if not self.path.startswith("/") or self.path.startswith("/v1/"):
            raise ValueError("path must start with / and not be under /v1/")


@dataclasses.dataclass(frozen=True, slots=True)
class TracingConfig:
    """OpenTelemetry GenAI spans built from the journal (off by default).

    Attributes:
        enabled: Build spans from every committed event and hand them to the exporter.
        otlp_endpoint: OTLP/HTTP traces URL (``http://collector:4318/v1/traces``);
            empty with ``enabled`` builds the spans but sends them nowhere (for tests
            and the overhead bench).
        sample_ratio: Share of traces kept, 0..1, decided per trace id (so a run's
            spans are kept or dropped together, and a rebuilt trace decides the same).
        service_name: ``service.name`` of the resource.
        export_timeout_s: Per OTLP request.
        exporter_nice: Niceness the exporter process adds to the daemon's, 0..19.
            Spans are background work read from the journal, which holds every
            event until they are sent: when the CPU is contended the daemon's
            steps go first and the exporter catches up after, instead of taking
            its share of the daemon's throughput. 0 runs it at the daemon's
            priority.
    """

    enabled: bool = False
    otlp_endpoint: str = ""
    sample_ratio: float = 1.0
    service_name: str = "palyra"
    export_timeout_s: float = 10.0
    exporter_nice: int = 10

    def __post_init__(self) -> None:
        if not 0.0 <= self.sample_ratio <= 1.0:
            raise ValueError("sample_ratio must be within 0..1")
        if self.otlp_endpoint and not self.otlp_endpoint.startswith(("http://", "https://")):
            raise ValueError("otlp_endpoint must be an http(s) URL")
        if self.export_timeout_s <= 0:
            raise ValueError("export_timeout_s must be > 0")
        if not 0 <= self.exporter_nice <= 19:
            raise ValueError("exporter_nice must be within 0..19")
