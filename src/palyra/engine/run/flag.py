"""A lighter ``asyncio.Event`` for what every open run holds.

``asyncio.Event`` makes its waiters' ``deque`` (about 600 bytes) and an
instance dict when it is made, waited on or not. Each open run holds three
(its end, its wake-up, its next commit) and makes a new one per commit, so
they were about 2 KB of every idle run's memory. ``Flag`` has the same
``set``/``clear``/``is_set``/``wait`` and makes its list of waiters on the
first wait.
"""

from __future__ import annotations

import asyncio


class Flag:
    """``asyncio.Event``'s behaviour; waiters' list made on demand (use on one loop)."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[None]] | None = None

    def is_set(self) -> bool:
        """Whether the flag is set."""
        return self._set

    def set(self) -> None:
        """Set the flag and wake every waiter."""
        if self._set:
            return
        self._set = True
        waiters, self._waiters = self._waiters, None
        for future in waiters or ():
            if not future.done():
                future.set_result(None)

    def clear(self) -> None:
        """Unset the flag: later waits block until the next ``set``."""
        self._set = False

    async def wait(self) -> None:
        """Return once the flag is set (at once if it is)."""
        if self._set:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(future)
        try:
            await future
        finally:
            # A cancelled waiter leaves the list (``set`` already dropped it otherwise).
            if self._waiters is not None and future in self._waiters:
                self._waiters.remove(future)
