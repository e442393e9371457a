"""Named asyncio locks (or slots), created on demand and dropped when unused."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence


class SlotWaitTimeout(TimeoutError):
    """No slot of the name came free within the hold's ``wait_s``."""


class _Gate:
    """A name's slots. Until a hold finds every slot taken they are a count (``free``),
    with no lock: nearly every hold (a session's, a delivery's dedupe key's) is its
    name's only one, and an ``asyncio.Lock`` made, acquired, released and dropped cost
    four Python calls more a hold. The first hold that must wait makes the lock (or
    semaphore), taken for the slots already held; from then on every hold of the entry
    goes through it, first come first served."""

    __slots__ = ("free", "gate", "slots", "users")

    def __init__(self, slots: int) -> None:
        self.slots = slots  # as the entry's first holder or waiter asked
        self.free = slots  # slots not held, while there is no gate
        self.gate: asyncio.Lock | asyncio.Semaphore | None = None
        self.users = 0  # holders and waiters: the entry goes when the last one leaves

    async def contended(self) -> asyncio.Lock | asyncio.Semaphore:
        """The gate, made now that every slot is held, as held by their holders."""
        if self.slots == 1:  # a lone slot is a plain Lock (the session writer's case)
            lock = asyncio.Lock()
            await lock.acquire()  # free and new: taken at once, without waiting
            self.gate = lock
        else:
            self.gate = asyncio.Semaphore(0)  # each holder's release gives its slot back
        return self.gate


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

    def hold(self, name: str, *, slots: int = 1,
             wait_s: float | None = None) -> _Hold:
        """Hold one of ``name``'s slots for the ``async with`` body.

        ``slots`` counts when the name's entry is made (by its first holder or
        waiter); ``wait_s`` bounds the wait for a slot (:class:`SlotWaitTimeout`), not
        the body.
        """
        return _Hold(self._gates, name, slots, wait_s)

    def hold_all(self, names: Sequence[str]) -> _HoldAll:
        """Hold one lock per name of ``names``, taken in that order (callers sort them,
        so two holders never wait on each other in a cycle) and given back in reverse."""
        return _HoldAll([_Hold(self._gates, name, 1, None) for name in names])


class _Hold:
    """One hold of a name's slot, as an ``async with`` (a class, not a generator-based
    context manager: several holds per channel message, and a generator's frame,
    wrapper and async-generator hooks cost more than the hold itself)."""

    __slots__ = ("_entry", "_gates", "_name", "_slots", "_wait_s")

    def __init__(self, gates: dict[str, _Gate], name: str, slots: int,
                 wait_s: float | None) -> None:
        self._gates, self._name, self._slots, self._wait_s = gates, name, slots, wait_s
        self._entry: _Gate | None = None

    async def __aenter__(self) -> None:
        name = self._name
        entry = self._gates.get(name)
        if entry is None:
            entry = self._gates[name] = _Gate(self._slots)
        entry.users += 1
        try:
            gate = entry.gate
            if gate is None:
                if entry.free:  # nobody waits for this name: the slot is a count
                    entry.free -= 1
                    self._entry = entry
                    return
                gate = await entry.contended()
            # A semaphore that is not ``locked()`` is taken without waiting (its
            # ``acquire`` checks the same), so no timer is armed and cancelled. (A Lock's
            # ``locked()`` is False while a woken waiter has yet to take it: not used.)
            if self._wait_s is None or (isinstance(gate, asyncio.Semaphore)
                                        and not gate.locked()):
                await gate.acquire()
            else:
                try:
                    async with asyncio.timeout(self._wait_s):
                        await gate.acquire()
                except TimeoutError:
                    raise SlotWaitTimeout(name) from None
        except BaseException:
            self._leave(entry)
            raise
        self._entry = entry

    async def __aexit__(self, *exc: object) -> None:
        entry = self._entry
        assert entry is not None  # entered
        self._entry = None
        if entry.gate is None:
            entry.free += 1
        else:  # a slot held as a count before the gate was made is given back through it
            entry.gate.release()
        self._leave(entry)

    def _leave(self, entry: _Gate) -> None:
        entry.users -= 1
        if not entry.users:
            del self._gates[self._name]


class _HoldAll:
    """Several holds as one ``async with`` (no AsyncExitStack: one per message)."""

    __slots__ = ("_entered", "_holds")

    def __init__(self, holds: list[_Hold]) -> None:
        self._holds = holds
        self._entered = 0

    async def __aenter__(self) -> None:
        try:
            for hold in self._holds:
                await hold.__aenter__()
                self._entered += 1
        except BaseException:
            await self._release()
            raise

    async def __aexit__(self, *exc: object) -> None:
        await self._release()

    async def _release(self) -> None:
        holds = self._holds
        while self._entered:
            self._entered -= 1
            await holds[self._entered].__aexit__(None, None, None)
