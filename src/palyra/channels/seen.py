"""Which dedupe rows may exist, so admitting a new message reads none of them.

Every delivery looks up its dedupe keys before it is admitted (its delivery id's and
its platform message id's). Nearly every one is new, so nearly every look-up misses;
yet each is an LMDB read on the event loop's thread, and each such read lets the
journal writer's thread take the GIL, which the loop may then wait for (up to the
interpreter's switch interval) while acks and runs queue behind it.

:class:`SeenKeys` is a Bloom filter over the dedupe keys the ``channels`` table may
hold: built from a scan of them by the sweep at start (``Admitter.rebuild_seen``, a page
at a time with the loop served between pages; until then every key is read), and told
of every key this process writes.
A key it has never been told of is certainly absent and is not read; a key it may
have seen is read as before (a false positive only costs that read). Dedupe keys are
already SHA-256 hex digests, so the filter's positions are slices of the key itself.

It trusts only what this process wrote: once another daemon's commits have written
the ``channels`` table (``JournalStore.foreign_writes``, on PostgreSQL), it answers
"maybe" for every key until it is rebuilt (and admission does not use it at all on a
journal other daemons share: their commits reach it only through the watcher's delay). Keys expire and are swept, and a filter
cannot forget, so the hourly sweep rebuilds it from the rows left; one that took in
more keys than it was sized for answers "maybe" until then. Its size is fixed at
each build (16 bits per key then, at least 2**20 bits): memory is bounded by the
table's own size, whatever a client sends.
"""

from __future__ import annotations

from collections.abc import Callable

MIN_BITS = 1 << 20
BITS_PER_KEY = 16
HASHES = 8
"""Positions per key: 8 at 16 bits per key gives about one false "maybe" in 2,000."""
_SLICE = 8  # hex digits per position (32 bits); 8 positions use all 64 of a digest


class SeenKeys:
    """A Bloom filter of dedupe keys (``dedupe:<sha256 hex>``) with a fixed capacity."""

    def __init__(self, count: int = 0, *, foreign: Callable[[], int] = lambda: 0) -> None:
        """Sized for ``count`` keys now in the table and as many again; add them next."""
        self._capacity = max(MIN_BITS // BITS_PER_KEY, 2 * count)
        self._bits_n = self._capacity * BITS_PER_KEY
        self._bits = bytearray(self._bits_n // 8 + 1)
        self._added = 0
        self._foreign = foreign
        self._foreign_at = foreign()

    def _positions(self, key: str) -> list[int] | None:
        digest = key.rpartition(":")[2]
        if len(digest) < HASHES * _SLICE:
            return None  # not a digest: never claimed absent
        try:
            return [int(digest[i * _SLICE:(i + 1) * _SLICE], 16) % self._bits_n
                    for i in range(HASHES)]
        except ValueError:
            return None

    def add(self, key: str) -> None:
        """``key`` may now be in the table (call before its commit: a "maybe" early
        only costs a read, a late one could wrongly say absent)."""
        positions = self._positions(key)
        if positions is None:
            return
        bits = self._bits
        for p in positions:
            bits[p >> 3] |= 1 << (p & 7)
        self._added += 1

    def absent(self, key: str) -> bool:
        """True only when ``key`` is certainly not in the table."""
        if self._added > self._capacity or self._foreign() != self._foreign_at:
            return False
        positions = self._positions(key)
        if positions is None:
            return False
        bits = self._bits
        return any(not bits[p >> 3] & (1 << (p & 7)) for p in positions)
