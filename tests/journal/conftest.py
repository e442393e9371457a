"""Fixtures for the journal tests: a fresh data dir and an open store per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from palyra.journal import JournalConfig, JournalStore


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data dir that does not exist yet (the store creates it 0700)."""
    return tmp_path / "data"


@pytest.fixture
async def store(data_dir: Path) -> AsyncIterator[JournalStore]:
    """A durable (sync=True) store, closed after the test."""
    opened = JournalStore.open(data_dir, config=JournalConfig(sync=True))
    try:
        yield opened
    finally:
        opened.close()
