"""Build the application object graph from the configuration.

journal → policy gate → tools → provider → engine → ``engine.recover()`` →
the ``PalyraApp`` facade the transports call. Every resource is entered on
the caller's exit stack, so the daemon closes them in reverse order.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import time
from typing import Any

from palyra_gen.palyra import v1

from palyra.config import PalyraConfig
from palyra.journal import JournalStore
from palyra.transport.auth import Caller
from palyra.transport.context import ContextFactory

try:
    VERSION = importlib.metadata.version("palyra")
except importlib.metadata.PackageNotFoundError:  # running from a source tree
    VERSION = "0.0.0"


class _InterimApp:
    """Health and journal head only, until ``palyra.app.PalyraApp`` is wired in."""

    def __init__(self, store: JournalStore) -> None:
        self._store = store
        self._started = time.monotonic()

    async def get_health(self, ctx: Any, request: v1.GetHealthRequest) -> v1.GetHealthResponse:
        head = self._store.head()
        return v1.GetHealthResponse(
            service="palyra", version=VERSION,
            uptime_ms=int((time.monotonic() - self._started) * 1000),
            journal_events=head.count, journal_head=head.head_hash,
        )

    async def get_journal_head(
        self, ctx: Any, request: v1.GetJournalHeadRequest
    ) -> v1.GetJournalHeadResponse:
        head = self._store.head()
        return v1.GetJournalHeadResponse(event_count=head.count, head_hash=head.head_hash,
                                         head_position=head.count)


def _make_ctx(caller: Caller | None) -> Caller | None:
    return caller


async def open_application(
    config: PalyraConfig, stack: contextlib.AsyncExitStack
) -> tuple[object, ContextFactory]:
    """Open every port and the facade; return the app and its context factory."""
    store = JournalStore.open(config.data_dir)
    stack.callback(store.close)
    return _InterimApp(store), _make_ctx
