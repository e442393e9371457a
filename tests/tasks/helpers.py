"""What the task tests share: a queue started on a journal they opened."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TypeVar

from palyra.journal import JournalStore
from palyra.tasks import TaskQueue

S = TypeVar("S", bound=JournalStore)


@contextlib.asynccontextmanager
async def started_queue(store: S) -> AsyncIterator[tuple[S, TaskQueue]]:
    """``store`` with a started queue on it; both closed on the way out."""
    queue = TaskQueue(store)
    await queue.start()
    try:
        yield store, queue
    finally:
        await queue.close()
        store.close()
