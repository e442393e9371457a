"""Which dedupe rows may exist, so admitting a new message reads none of them.

Every delivery looks up its dedupe keys before it is admitted (its delivery id's and
its platform message id's). Nearly every one is new, so nearly every look-up misses;
yet each is an LMDB read on the event loop's thread, and each such read lets the
journal writer's thread take the GIL, which the loop may then wait for (up to the
interpreter's switch interval) while acks and runs queue behind it.

:class:`SeenKeys` is a :class:`~palyra.core.key_filter.KeyFilter` over the dedupe keys
the ``channels`` table may hold: built from a scan of them by the sweep at start
(``Admitter.rebuild_seen``, a page at a time with the loop served between pages; until
then every key is read), and told of every key this process writes. A key it has never
been told of is certainly absent and is not read; a key it may have seen is read as
before (a false "maybe" only costs that read).

It trusts only what this process wrote: once another daemon's commits have written
the ``channels`` table (``JournalStore.foreign_writes``, on PostgreSQL), it answers
"maybe" for every key until it is rebuilt (and admission does not use it at all on a
journal other daemons share: their commits reach it only through the watcher's delay).
Keys expire and are swept, and a filter cannot forget, so the hourly sweep rebuilds it
from the rows left; one that took in more keys than it was sized for answers "maybe"
until then. Its size is fixed at each build: memory is bounded by the table's own size,
whatever a client sends.
"""

from __future__ import annotations

from collections.abc import Callable

from palyra.core.key_filter import KeyFilter


class SeenKeys:
    """The dedupe keys (``dedupe:<sha256 hex>``) this process may have written."""

    def __init__(self, count: int = 0, *, foreign: Callable[[], int] = lambda: 0) -> None:
        """Sized for ``count`` keys now in the table and as many again; add them next."""
        self._keys = KeyFilter(count)
        self._foreign = foreign
        self._foreign_at = foreign()

    def add(self, key: str) -> None:
        """``key`` may now be in the table (call before its commit: a "maybe" early
        only costs a read, a late one could wrongly say absent)."""
        self._keys.add(key)

    def absent(self, key: str) -> bool:
        """True only when ``key`` is certainly not in the table."""
        return self._foreign() == self._foreign_at and self._keys.absent(key)
