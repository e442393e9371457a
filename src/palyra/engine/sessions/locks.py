"""Named asyncio locks (or slots), created on demand and dropped when unused."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class SlotWaitTimeout(TimeoutError):
    """No slot of the name came free within the hold's ``wait_s``."""


class _Gate:
    __slots__ = ("gate", "users")

    def __init__(self, slots: int) -> None:
        # A lone slot is a plain Lock (the session writer's case, on the hot path).
        self.gate = asyncio.Lock() if slots == 1 else asyncio.Semaphore(slots)
        self.users = 0  # holders and waiters: the entry goes when the last one leaves


class KeyedLocks:
    """Up to ``slots`` holders per name at once (one: a lock); a name's entry is
    removed when nobody holds or awaits it, so memory follows what is in flight,
    not how many names were ever seen.

    Used to serialise read-modify-write of one session record (or one selector
    during get-or-create) without a global lock, so unrelated sessions still share
    group commits; and for per-route or per-channel concurrency, whose names come
    from outside.
    """

    def __init__(self) -> None:
        self._gates: dict[str, _Gate] = {}

    def __len__(self) -> int:
        """Names held or awaited right now."""
        return len(self._gates)

    @asynccontextmanager
    async def hold(self, name: str, *, slots: int = 1,
                   wait_s: float | None = None) -> AsyncIterator[None]:
        """Hold one of ``name``'s slots for the ``async with`` body.

        ``slots`` counts when the name's entry is made (by its first holder or
        waiter); ``wait_s`` bounds the wait for a slot (:class:`SlotWaitTimeout`), not
        the body.
        """
        entry = self._gates.get(name)
        if entry is None:
            entry = self._gates[name] = _Gate(slots)
        entry.users += 1
        try:
            if wait_s is None:
                await entry.gate.acquire()
            else:
                try:
                    async with asyncio.timeout(wait_s):
                        await entry.gate.acquire()
                except TimeoutError:
                    raise SlotWaitTimeout(name) from None
            try:
                yield
            finally:
                entry.gate.release()
        finally:
            entry.users -= 1
            if not entry.users:
                del self._gates[name]
