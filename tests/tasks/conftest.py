"""The task tests' common fixture: a queue started on a fresh LMDB journal."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from palyra.journal import JournalConfig, JournalStore
from palyra.tasks import TaskQueue


@pytest.fixture
async def opened(tmp_path: Path) -> AsyncIterator[tuple[JournalStore, TaskQueue]]:
    """A started queue on a fresh journal, closed after the test."""
    store = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False))
    queue = TaskQueue(store)
    await queue.start()
    try:
        yield store, queue
    finally:
        await queue.close()
        store.close()
