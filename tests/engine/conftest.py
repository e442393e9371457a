"""Fixtures for engine tests: a real engine per test on a temp data dir."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from engine_harness import Harness

from palyra.testing.postgres import PostgresServer


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    h = Harness(tmp_path / "data")
    yield h
    if h.store is not None and h._stack is not None:
        await h.stop()


@pytest.fixture
def dsn(postgres_server: PostgresServer) -> str:
    """A fresh database on the session's PostgreSQL server."""
    return postgres_server.create_database()


@pytest.fixture
async def daemons() -> AsyncIterator[list[Harness]]:
    """Engines standing for daemons on one journal (``lease_daemons.pg_daemon``), stopped after."""
    made: list[Harness] = []
    yield made
    for harness in made:
        if harness.store is not None and harness._stack is not None:
            await harness.stop()
