"""What a daemon's metrics read: its own module, so that the fold
(``palyra.ops.metrics``) and the Prometheus side (``palyra.ops.exposition``, imported at
the first scrape) both name it without importing each other."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from palyra.channels import ChannelRouter
from palyra.engine import Engine
from palyra.journal import JournalStore
from palyra.memory.service import Memory
from palyra.tasks import TaskQueue


@dataclass
class MetricSources:
    """What the daemon has that the gauges read (each optional but the store)."""

    store: JournalStore
    engine: Engine | None = None
    tasks: TaskQueue | None = None
    memory: Memory | None = None
    streams_open: Callable[[], Mapping[str, int]] | None = None
    channels: ChannelRouter | None = None
    models: dict[str, str] = field(default_factory=dict)  # provider name → model name
