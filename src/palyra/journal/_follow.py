"""Live subscriptions: replay from a cursor, then follow new commits.

The writer bumps a commit generation after every durable commit and wakes the
waiters. A follower reads by cursor (position or tape_seq) and, when it has
caught up, waits for a generation newer than the one it saw *before* its last
read, so a commit landing between the read and the wait is never missed. The
cursor makes the replay→live boundary exact: no gap, no duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

T = TypeVar("T")


class CommitNotifier:
    """Commit generation counter with cross-thread wake-ups."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = 0
        self._closed = False
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    @property
    def generation(self) -> int:
        """Number of commits seen so far."""
        return self._generation

    @property
    def closed(self) -> bool:
        """True once the store closed; followers then stop."""
        return self._closed

    def notify(self, *, close: bool = False) -> None:
        """Called by the writer thread after each commit (and once on close)."""
        with self._lock:
            self._generation += 1
            self._closed = self._closed or close
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            # A closed loop raises RuntimeError: its follower is gone too.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_wake, future)

    async def wait_past(self, generation: int) -> None:
        """Return once the generation is newer than ``generation`` (or the store closed)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._generation != generation or self._closed:
                return
            self._waiters.append((loop, future))
        await future


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def follow_cursor(
    notifier: CommitNotifier,
    fetch: Callable[[int], list[T]],
    cursor_of: Callable[[T], int],
    after: int,
) -> AsyncIterator[T]:
    """Yield ``fetch(after)`` pages forever, advancing ``after`` by each item's cursor."""
    while not notifier.closed:
        generation = notifier.generation
        page = fetch(after)
        if not page:
            await notifier.wait_past(generation)
            continue
        for item in page:
            after = cursor_of(item)
            yield item
