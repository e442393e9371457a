"""Named asyncio locks, created on demand and dropped when unused."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class KeyedLocks:
    """One ``asyncio.Lock`` per name; the entry is removed when nobody holds or awaits it.

    Used to serialise read-modify-write of one session record (or one
    selector during get-or-create) without a global lock, so unrelated
    sessions still share group commits.
    """

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, name: str) -> AsyncIterator[None]:
        """Hold the lock called ``name`` for the ``async with`` body."""
        lock, users = self._locks.get(name, (asyncio.Lock(), 0))
        self._locks[name] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[name]
            if users <= 1:
                del self._locks[name]
            else:
                self._locks[name] = (lock, users - 1)
