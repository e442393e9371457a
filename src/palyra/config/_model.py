"""The daemon's configuration: one frozen dataclass per concern.

Every field has a default, so the daemon starts with no configuration at all
(``nox -s serve``). Values are layered TOML file → ``PALYRA_*`` environment →
CLI flags by :mod:`palyra.config._load`; nothing here reads the environment.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal, TypeAlias

from palyra.channels.config import ChannelsConfig
from palyra.engine import EngineConfig
from palyra.journal import JournalConfig
from palyra.learning import LearningConfig
from palyra.memory.config import MemoryConfig
from palyra.ops.config import MetricsConfig, TracingConfig
from palyra.policy import PolicyConfig
from palyra.providers import ProviderConfig
from palyra.tools import ToolsConfig
from palyra.usage import UsageConfig
from palyra.watchdog import WatchdogConfig

LogFormat: TypeAlias = Literal["kv", "json", "console"]
LogLevel: TypeAlias = Literal["debug", "info", "warning", "error"]

DEFAULT_GRPC_PORT = 7443
DEFAULT_HTTP_PORT = 7142
MIB = 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class GrpcConfig:
    """The gRPC listener.

    Attributes:
        host: Interface to bind. Loopback by default: exposing the daemon is a
            deliberate act.
        port: TCP port; 0 picks an ephemeral port (written to ``daemon.json``).
        max_message_bytes: Largest single gRPC message accepted or sent.
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_GRPC_PORT
    max_message_bytes: int = 4 * MIB


@dataclasses.dataclass(frozen=True, slots=True)
class HttpConfig:
    """The HTTP/JSON + SSE listener.

    Attributes:
        host: Interface to bind.
        port: TCP port; 0 picks an ephemeral port.
        max_request_bytes: Largest request body; bigger bodies get 413 before
            anything is decoded.
        sse_error_grace_s: How long a server-streaming call may take to fail
            before the 200 + SSE headers are sent. Errors inside this window
            become plain HTTP errors (404, 403, ...); later ones become an
            ``event: error`` frame.
        sse_keepalive_s: Interval of ``:`` comment frames on idle streams, so
            proxies keep the connection and dead clients are noticed.
        max_header_bytes: Largest request line plus headers; more is refused with
            431 before anything is buffered beyond it.
        max_headers: Most header lines a request may carry (431 above).
        header_timeout_s: A connection must deliver a request's line and headers
            within this long (from connecting, or from the end of the previous
            response); slow or silent connections are closed (slowloris).
        body_timeout_s: A request body must arrive within this long (408 then, and
            the connection is closed).
        body_min_bytes_per_s: After its first 5 s, a request body must arrive at
            least this fast on average (408 and close otherwise).
        keepalive_s: An idle keep-alive connection is closed after this long.
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_HTTP_PORT
    max_request_bytes: int = 1 * MIB
    sse_error_grace_s: float = 0.25
    sse_keepalive_s: float = 15.0
    max_header_bytes: int = 64 * 1024
    max_headers: int = 100
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    body_min_bytes_per_s: float = 1024.0
    keepalive_s: float = 5.0


@dataclasses.dataclass(frozen=True, slots=True)
class AuthConfig:
    """Credentials the gateway accepts.

    Attributes:
        admin_token: The admin bearer token. Empty means: read
            ``<data_dir>/admin.token``, generating it (0600) on first start.
        connector_tokens: Channel-connector tokens. Each entry is ``TOKEN`` or
            ``CHANNEL=TOKEN``; the latter only speaks for ``channel:CHANNEL``.
            Connector tokens may call RouteMessage and nothing else.
        bound_principal: If set, every admin call must use this principal.
        require_ulid_device_id: Require ``x-palyra-device-id`` to be a ULID.
    """

    admin_token: str = ""
    connector_tokens: tuple[str, ...] = ()
    bound_principal: str = ""
    require_ulid_device_id: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class LogConfig:
    """Structured logging.

    Attributes:
        level: Minimum level emitted.
        format: ``kv`` (key=value lines, the default), ``json`` (one object per line)
            or ``console`` (aligned, human-first lines).
    """

    level: LogLevel = "info"
    format: LogFormat = "kv"


@dataclasses.dataclass(frozen=True, slots=True)
class DaemonConfig:
    """Process-level behaviour.

    Attributes:
        shutdown_grace_s: On SIGTERM/SIGINT, how long in-flight calls get to
            finish before they are cancelled (runs are parked durably either way).
        checkpoint_interval_s: How often the daemon signs the journal head
            (ed25519) while events arrive; it also signs once at shutdown.
            ``0`` turns periodic signing off.
    """

    shutdown_grace_s: float = 5.0
    checkpoint_interval_s: float = 300.0


@dataclasses.dataclass(frozen=True, slots=True)
class PalyraConfig:
    """Everything ``palyra serve`` needs, one section per concern.

    The ``provider``, ``engine``, ``journal``, ``policy`` and ``tools``
    sections are the owning packages' own config dataclasses, loaded the same
    way (``[engine]`` in TOML, ``PALYRA_ENGINE_MAX_TURNS`` in the env, ...).

    Attributes:
        data_dir: Where the journal, ``admin.token`` and ``daemon.json`` live.
    """

    data_dir: Path = Path("./palyra-data")
    grpc: GrpcConfig = dataclasses.field(default_factory=GrpcConfig)
    http: HttpConfig = dataclasses.field(default_factory=HttpConfig)
    auth: AuthConfig = dataclasses.field(default_factory=AuthConfig)
    log: LogConfig = dataclasses.field(default_factory=LogConfig)
    daemon: DaemonConfig = dataclasses.field(default_factory=DaemonConfig)
    provider: ProviderConfig = dataclasses.field(default_factory=ProviderConfig)
    # More named providers (``[[providers]]``) agents may route to; ``provider`` is
    # the default one, answering runs without an agent route.
    providers: tuple[ProviderConfig, ...] = ()
    usage: UsageConfig = dataclasses.field(default_factory=UsageConfig)
    engine: EngineConfig = dataclasses.field(default_factory=EngineConfig)
    journal: JournalConfig = dataclasses.field(default_factory=JournalConfig)
    policy: PolicyConfig = dataclasses.field(default_factory=PolicyConfig)
    tools: ToolsConfig = dataclasses.field(default_factory=ToolsConfig)
    watchdog: WatchdogConfig = dataclasses.field(default_factory=WatchdogConfig)
    learning: LearningConfig = dataclasses.field(default_factory=LearningConfig)
    memory: MemoryConfig = dataclasses.field(default_factory=MemoryConfig)
    channels: ChannelsConfig = dataclasses.field(default_factory=ChannelsConfig)
    metrics: MetricsConfig = dataclasses.field(default_factory=MetricsConfig)
    tracing: TracingConfig = dataclasses.field(default_factory=TracingConfig)
