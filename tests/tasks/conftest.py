"""The task tests' common fixture: a queue started on a fresh LMDB journal."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from palyra.journal import JournalConfig, JournalStore
from palyra.tasks import TaskQueue

from .helpers import started_queue


@pytest.fixture
async def opened(tmp_path: Path) -> AsyncIterator[tuple[JournalStore, TaskQueue]]:
    """A started queue on a fresh journal, closed after the test."""
    async with started_queue(JournalStore.open(
            tmp_path / "data", config=JournalConfig(sync=False))) as opened:
        yield opened
