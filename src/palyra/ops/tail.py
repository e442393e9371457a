"""The journal's newly committed events, taken in batches at the reader's own pace.

Metrics and spans are folded from what the writer already hands its followers:
a global subscription buffers the writer's own event objects (no store read, no
decode, and no wake-up per commit), and :meth:`JournalTail.take` drains it. The
buffer is bounded; when a drain comes too late it was dropped, and ``take`` reads
the store from where it left off instead.
"""

from __future__ import annotations

from palyra.journal import JournalStore, StoredEvent

_PAGE = 1000
MAX_EVENTS = 8192  # a quarter second of a busy daemon between drains
MAX_BYTES = 8 * 1024 * 1024
MAX_PAGES = 200  # one store read takes at most 200k events; the rest at the next take


class JournalTail:
    """Events committed after the head at construction (or ``after``), each taken once."""

    def __init__(self, store: JournalStore, after: int | None = None,
                 max_events: int = MAX_EVENTS, max_bytes: int = MAX_BYTES) -> None:
        self._store = store
        self._live = store.subscribe_all(max_events, max_bytes)
        head = store.head().count
        self.after = head if after is None else after
        self._behind = self.after < head  # committed before the subscription: read first

    @property
    def overflowed(self) -> bool:
        """The buffer was dropped since the last take (the next one reads the store)."""
        return self._live.overflowed

    def take(self) -> list[StoredEvent]:
        """Every event committed since the last take, in journal order."""
        live, taken = self._live, []
        if live.overflowed or self._behind:
            live.reset()
            self._behind = False
            taken = self._read_store()
        after = self.after
        while live.buffer:
            event = live.take()
            if event.position > after:  # the store read may have taken it already
                taken.append(event)
                after = event.position
        self.after = after
        return taken

    def close(self) -> None:
        """Stop buffering (closing the store ends it too)."""
        self._store.unsubscribe(self._live)

    def _read_store(self) -> list[StoredEvent]:
        taken: list[StoredEvent] = []
        for _ in range(MAX_PAGES):
            events = self._store.read_range(self.after, _PAGE)
            taken.extend(events)
            if events:
                self.after = events[-1].position
            if len(events) < _PAGE:
                break
        return taken
