"""Live subscriptions: replay from a cursor, then follow new commits.

Global followers (``follow``): the writer bumps a commit generation after
every durable commit and wakes the waiters; a follower reads by position and,
when caught up, waits for a generation newer than the one it saw *before* its
last read, so a commit landing between the read and the wait is never missed.

Tape followers (``follow_tape``) are served from memory: after a commit the
writer hands the events it just built to the followers of *that run only*
(:class:`TapeHub`), so nothing is re-read or re-decoded and other runs'
followers are not woken. A follower subscribes before it reads the store, so
an event is either in its replay or in its queue (both: the duplicate is
skipped by ``tape_seq``); a queue that overflows its bound, or a gap in
``tape_seq``, sends the follower back to the store by cursor. The replay→live
boundary stays exact: no gap, no duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TypeVar

from palyra.journal._types import StoredEvent

T = TypeVar("T")


class CommitNotifier:
    """Commit generation counter with cross-thread wake-ups."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generation = 0
        self._closed = False
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.tapes = TapeHub()

    @property
    def generation(self) -> int:
        """Number of commits seen so far."""
        return self._generation

    @property
    def closed(self) -> bool:
        """True once the store closed; followers then stop."""
        return self._closed

    def notify(self, events: Sequence[StoredEvent] = (), *, close: bool = False) -> None:
        """Called by the writer thread after each commit (and once on close)."""
        with self._lock:
            self._generation += 1
            self._closed = self._closed or close
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            # A closed loop raises RuntimeError: its follower is gone too.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_wake, future)
        self.tapes.publish(events, close=close)

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


#: Events a tape follower may have queued before it is sent back to the store.
MAX_QUEUED = 1024


class TapeSubscription:
    """One follower's bounded queue of a run's committed tape events (its own loop)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._events: deque[StoredEvent] = deque()
        self._wake: asyncio.Future[None] | None = None
        self.overflowed = False
        self.closed = False

    def push(self, events: Sequence[StoredEvent], close: bool) -> None:
        """On the follower's loop: queue ``events`` (or note the overflow) and wake it."""
        if close:
            self.closed = True
        elif self.overflowed or len(self._events) + len(events) > MAX_QUEUED:
            self.overflowed = True  # memory stays bounded; the store has them all
            self._events.clear()
        else:
            self._events.extend(events)
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def take(self) -> list[StoredEvent]:
        """Wait for queued events (empty after an overflow or a close)."""
        while not self._events and not self.overflowed and not self.closed:
            self._wake = self.loop.create_future()
            await self._wake
        events = list(self._events)
        self._events.clear()
        return events


class TapeHub:
    """Which followers watch which run; hands each commit's events to those only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_run: dict[str, set[TapeSubscription]] = {}
        self._closed = False

    def subscribe(self, run_id: str) -> TapeSubscription:
        """A new subscription to ``run_id``'s tape, on the running loop."""
        sub = TapeSubscription(asyncio.get_running_loop())
        with self._lock:
            sub.closed = self._closed
            self._by_run.setdefault(run_id, set()).add(sub)
        return sub

    def unsubscribe(self, run_id: str, sub: TapeSubscription) -> None:
        """Forget ``sub`` (its follower ended)."""
        with self._lock:
            subs = self._by_run.get(run_id)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._by_run[run_id]

    def publish(self, events: Sequence[StoredEvent], close: bool = False) -> None:
        """Writer thread: give each run's new tape events to its subscribers."""
        per_run: dict[str, list[StoredEvent]] = {}
        for event in events:
            if event.tape_seq >= 0:
                per_run.setdefault(event.run_id, []).append(event)
        with self._lock:
            self._closed = self._closed or close
            targets = ([(sub, []) for subs in self._by_run.values() for sub in subs] if close
                       else [(sub, run_events) for run_id, run_events in per_run.items()
                             for sub in self._by_run.get(run_id, ())])
        for sub, run_events in targets:
            with contextlib.suppress(RuntimeError):  # the follower's loop is gone
                sub.loop.call_soon_threadsafe(sub.push, run_events, close)


async def follow_tape(
    hub: TapeHub,
    fetch: Callable[[int], list[StoredEvent]],
    run_id: str,
    after: int,
    closed: Callable[[], bool],
) -> AsyncIterator[StoredEvent]:
    """Replay ``run_id``'s tape after ``after`` from the store, then follow it from memory."""
    sub = hub.subscribe(run_id)
    try:
        while not (closed() or sub.closed):
            page = fetch(after)  # replay, or catch up after an overflow or a gap
            if page:
                for event in page:
                    after = event.tape_seq
                    yield event
                continue
            sub.overflowed = False
            while not sub.closed:
                events = await sub.take()
                if sub.overflowed:
                    break  # back to the store, by cursor
                gap = False
                for event in events:
                    if event.tape_seq <= after:
                        continue  # also in the replay just read
                    if event.tape_seq != after + 1:
                        gap = True
                        break
                    after = event.tape_seq
                    yield event
                if gap:
                    break
    finally:
        hub.unsubscribe(run_id, sub)
