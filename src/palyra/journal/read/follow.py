"""Live subscriptions: replay from a cursor, then follow new commits from memory.

After each durable commit the writer hands the events it just built (payloads
already decoded) to the :class:`FollowHub`, which passes them to the followers
that want them: a tape follower gets only its run's tape events, a global
follower every event. Nothing just committed is read back or decoded again.
A tap (:meth:`FollowHub.tap`) is handed every commit on the committing thread
itself, before the commit is answered: for a consumer that only folds what it
reads (``/metrics``), with no hop to an event loop.

A follower never trusts memory alone; the store stays the source of truth:

* it subscribes *before* its first store read, so every commit is either
  visible to that read or delivered to its buffer afterwards (the writer
  publishes only after the commit), and usually both;
* cursors (position or tape_seq) are dense, so an item at or below the cursor
  is a duplicate and is dropped, and an item past ``cursor + 1`` is a gap,
  which sends the follower back to the store;
* each follower's buffer is bounded (events and bytes). A follower that falls
  behind (its consumer is slow, or gone) overflows: its buffer is dropped and
  it reads from the store by cursor when it next runs, exactly like a
  follower resuming from a cursor. Memory per follower stays bounded whatever
  its consumer does.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence

from palyra.journal._types import StoredEvent

_Pairs = Sequence[tuple[StoredEvent, int]]
"""Committed events with their approximate sizes in bytes (what a buffer counts)."""

Tap = Callable[[_Pairs], None]
"""Run on the committing thread with each commit's pairs (see :meth:`FollowHub.tap`)."""


class Subscription:
    """One follower's bounded inbox; filled on its event loop, drained by its generator."""

    __slots__ = ("buffer", "buffered_bytes", "key", "loop", "max_bytes",
                 "max_events", "overflowed", "overflows", "waiter")  # fmt: skip

    def __init__(
        self, loop: asyncio.AbstractEventLoop, key: str | None, max_events: int, max_bytes: int
    ) -> None:
        self.loop = loop
        self.key = key
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.buffer: deque[StoredEvent] = deque()
        self.buffered_bytes = 0
        self.overflowed = False
        self.overflows = 0
        self.waiter: asyncio.Future[None] | None = None

    def deliver(self, events: Sequence[tuple[StoredEvent, int]]) -> None:
        """Buffer ``(event, size)`` pairs (loop thread); overflow drops the whole buffer."""
        if not self.overflowed:
            for event, size in events:
                self.buffer.append(event)
                self.buffered_bytes += size
            if len(self.buffer) > self.max_events or self.buffered_bytes > self.max_bytes:
                # The store has every one of these: drop them and re-read later.
                self.buffer.clear()
                self.buffered_bytes = 0
                self.overflowed = True
                self.overflows += 1
        self.wake()

    def wake(self) -> None:
        """Resolve the pending wait, if any (loop thread)."""
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def take(self) -> StoredEvent:
        """Pop the oldest buffered event (the caller checked the buffer is not empty)."""
        event = self.buffer.popleft()
        if not self.buffer:
            self.buffered_bytes = 0
        return event

    def reset(self) -> None:
        """Forget the buffer and the overflow; the follower is about to read the store."""
        self.buffer.clear()
        self.buffered_bytes = 0
        self.overflowed = False

    async def wait(self) -> None:
        """Wait until something is delivered or the hub closes."""
        waiter = self.loop.create_future()
        self.waiter = waiter
        try:
            await waiter
        finally:
            self.waiter = None


Deliveries = dict[asyncio.AbstractEventLoop, list[tuple[Subscription, _Pairs]]]
"""Per event loop, what each of its subscriptions gets from one commit."""


class FollowHub:
    """Routes committed events from the writer thread to the followers that want them."""

    def __init__(self, max_events: int, max_bytes: int) -> None:
        self._lock = threading.Lock()
        self._max_events = max(1, max_events)
        self._max_bytes = max(1, max_bytes)
        self._global: list[Subscription] = []
        self._by_run: dict[str, list[Subscription]] = {}
        self._taps: list[Tap] = []
        self.tap_failures = 0
        self.closed = False

    def subscribe(self, key: str | None) -> Subscription:
        """Register a follower of run ``key`` (or of every event) on the running loop."""
        sub = Subscription(asyncio.get_running_loop(), key, self._max_events, self._max_bytes)
        with self._lock:
            if key is None:
                self._global = [*self._global, sub]
            else:
                self._by_run[key] = [*self._by_run.get(key, ()), sub]
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """Drop a follower; deliveries already scheduled for it are harmless."""
        with self._lock:
            if sub.key is None:
                self._global = [s for s in self._global if s is not sub]
                return
            rest = [s for s in self._by_run.get(sub.key, ()) if s is not sub]
            if rest:
                self._by_run[sub.key] = rest
            else:
                self._by_run.pop(sub.key, None)

    def tap(self, tap: Tap) -> Tap:
        """Run ``tap`` with every commit's ``(event, size)`` pairs from now on, on the
        thread that committed them (the writer's, or a PostgreSQL watch thread's for
        another daemon's commits), before the commit is answered; :meth:`untap` ends it.

        For a consumer that only folds what it reads (``/metrics``): it reads the
        events where they were just built, with no hop to an event loop, and an
        append's events are folded by the time the append returns. ``tap`` must be
        quick, thread-safe (two threads may call it) and must not raise: an exception
        is counted in :attr:`tap_failures` and otherwise ignored, so it cannot cost a
        commit or its followers anything.
        """
        with self._lock:
            self._taps = [*self._taps, tap]
        return tap

    def untap(self, tap: Tap) -> None:
        """Stop calling ``tap`` (again is harmless)."""
        with self._lock:
            self._taps = [t for t in self._taps if t is not tap]

    def followed(self) -> bool:
        """True when anyone follows anything (the writer's cue to build what ``publish`` takes).

        Read without the lock: a follower that subscribes after this said False
        reads the store after subscribing, and that read already sees the commit
        (the writer asks only once the commit is durable, and reads of this
        process wait until LMDB holds it), as with ``publish`` finding nobody.
        """
        return bool(self._global) or bool(self._by_run) or bool(self._taps)

    def publish(self, events: Sequence[tuple[StoredEvent, int]]) -> None:
        """Hand one durable commit's ``(event, size)`` pairs to its followers (writer thread).

        One ``call_soon_threadsafe`` per event loop per commit, and none when
        nobody follows what was committed.
        """
        for loop, items in self.deliveries(events).items():
            # A closed loop raises RuntimeError: its followers are gone too.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(deliver, items)

    def deliveries(self, events: Sequence[tuple[StoredEvent, int]]) -> Deliveries:
        """What ``publish`` would hand each event loop, for a caller that schedules it
        (the writer does, in the same wake-up that answers the commit's callers).
        The taps run here first, on the calling thread."""
        with self._lock:
            global_subs, by_run, taps = self._global, self._by_run, self._taps
        for tap in taps:
            try:
                tap(events)
            except Exception:  # a consumer's bug must not fail a durable commit
                self.tap_failures += 1
        per_loop: Deliveries = {}
        if not global_subs and not by_run:
            return per_loop
        for sub in global_subs:
            per_loop.setdefault(sub.loop, []).append((sub, events))
        if by_run:
            tapes: dict[str, list[tuple[StoredEvent, int]]] = {}
            for pair in events:
                event = pair[0]
                if event.tape_seq >= 0 and event.run_id in by_run:
                    tapes.setdefault(event.run_id, []).append(pair)
            for run_id, tape in tapes.items():
                for sub in by_run.get(run_id, ()):
                    per_loop.setdefault(sub.loop, []).append((sub, tape))
        return per_loop

    def close(self) -> None:
        """End every follower (the store closed)."""
        with self._lock:
            self.closed = True
            subs = [*self._global, *(s for run in self._by_run.values() for s in run)]
        for sub in subs:
            with contextlib.suppress(RuntimeError):
                sub.loop.call_soon_threadsafe(sub.wake)


def deliver(items: list[tuple[Subscription, _Pairs]]) -> None:
    """Hand each subscription its events (on the subscriptions' event loop)."""
    for sub, events in items:
        sub.deliver(events)


MAX_BATCH_EVENTS = 512
"""Most events one yielded batch holds (a replay page is cut into batches of this size)."""


async def follow_batches(
    hub: FollowHub,
    key: str | None,
    fetch: Callable[[int], list[StoredEvent]],
    cursor_of: Callable[[StoredEvent], int],
    after: int,
    sub: Subscription | None = None,
) -> AsyncGenerator[list[StoredEvent], None]:
    """Yield batches of events past ``after`` forever: store pages, then what commits deliver.

    ``fetch(after)`` reads the store by cursor; ``cursor_of`` gives an event's
    dense cursor. A live batch is everything buffered when the consumer asks:
    one commit's events, or several commits' if the consumer fell behind. A
    batch is never empty and holds at most :data:`MAX_BATCH_EVENTS`. Ends when
    the hub closes.

    ``sub``: a subscription to ``key`` taken before ``key``'s first event could
    commit (``after`` is then -1): its buffer holds every event from the first,
    so the store is read only after a gap or an overflow, never to start (that
    read would wait for LMDB to hold the commit that just landed).
    """
    behind = sub is None  # read the store before trusting the buffer
    if sub is None:
        sub = hub.subscribe(key)
    try:
        while not hub.closed:
            if sub.overflowed:
                sub.reset()
                behind = True
            if behind:
                page = fetch(after)
                if page:
                    after = cursor_of(page[-1])
                    for start in range(0, len(page), MAX_BATCH_EVENTS):
                        yield page[start : start + MAX_BATCH_EVENTS]
                    continue
                behind = False  # caught up with the store as of this read
            batch: list[StoredEvent] = []
            while (sub.buffer and not sub.overflowed and not hub.closed
                   and len(batch) < MAX_BATCH_EVENTS):
                event = sub.take()
                cursor = cursor_of(event)
                if cursor <= after:
                    continue  # already read from the store
                if cursor != after + 1:
                    behind = True  # a gap: the store has what is missing
                    sub.reset()
                    break
                after = cursor
                batch.append(event)
            if batch:
                yield batch
            if not behind and not sub.buffer and not sub.overflowed and not hub.closed:
                await sub.wait()
    finally:
        hub.unsubscribe(sub)


async def follow_events(
    hub: FollowHub,
    key: str | None,
    fetch: Callable[[int], list[StoredEvent]],
    cursor_of: Callable[[StoredEvent], int],
    after: int,
) -> AsyncIterator[StoredEvent]:
    """:func:`follow_batches`, one event at a time."""
    batches = follow_batches(hub, key, fetch, cursor_of, after)
    try:
        async for batch in batches:
            for event in batch:
                yield event
    finally:
        await batches.aclose()
