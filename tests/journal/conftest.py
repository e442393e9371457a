"""Fixtures for the journal tests: a fresh data dir and an open store per test.

``store`` is parametrized over both backends: every test written against it
runs on LMDB and on a real PostgreSQL server (a fresh database per test), the
proof that both are the same journal.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from palyra.journal import JournalConfig, JournalStore

from .helpers import BACKENDS, config_for


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data dir that does not exist yet (the store creates it 0700)."""
    return tmp_path / "data"


@pytest.fixture(params=BACKENDS)
def journal_config(request: pytest.FixtureRequest) -> JournalConfig:
    """A durable (sync=True) store's config, on LMDB or on a fresh PostgreSQL database."""
    server = request.getfixturevalue("postgres_server") if request.param == "postgres" else None
    return config_for(request.param, server, sync=True)


@pytest.fixture
async def store(data_dir: Path, journal_config: JournalConfig) -> AsyncIterator[JournalStore]:
    """A durable store on each backend, closed after the test."""
    opened = JournalStore.open(data_dir, config=journal_config)
    try:
        yield opened
    finally:
        opened.close()
