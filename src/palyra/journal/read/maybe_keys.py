"""Which keys of a table's key range may hold a row, so a look-up of a new key reads none.

A message to a new conversation looks up its session by key (``sessions``/``key:…``)
and misses. The miss was an LMDB read on the event loop's thread, and py-lmdb lets go
of the GIL for it: the journal writer's thread, woken by the admission or run start
just queued, takes the GIL and commits a smaller group, so the daemon makes more
commits per message (``bench ingress``, Standard Webhooks, C=16: 0.49-0.50 commits per
message with that read skipped, against 0.59-0.62), and the loop waits for the GIL
back. The same reason made ``channels/seen.py`` for the dedupe keys.

:class:`MaybeKeys` is a Bloom filter over the keys of one range: built from a scan of
the range when the store opens (after recovery, before its writer takes a commit),
and told by the writer's thread of every key a commit writes there, before anyone
hears of that commit (``EntityCache.wrote``). A key it was never told of has no row,
and is not read; one it may have seen is read as before (a false "maybe" costs that
read). A filter cannot forget: a deleted key stays "maybe". Sized at the build (16
bits per key then, twice the keys there, at least 2**20 bits); once told of more keys
than that it answers "maybe" for every key, as before it existed.
"""

from __future__ import annotations

MIN_BITS = 1 << 20
BITS_PER_KEY = 16
HASHES = 8
"""Positions per key: 8 at 16 bits per key gives about one false "maybe" in 2,000."""
MAX_BUILD_KEYS = 250_000
"""A range with more keys than this gets no filter (its scan would slow the opening)."""


class MaybeKeys:
    """A Bloom filter of string keys with a fixed capacity (one process: ``hash()``)."""

    def __init__(self, count: int = 0) -> None:
        """Sized for ``count`` keys now in the range and as many again; add them next."""
        self._capacity = max(MIN_BITS // BITS_PER_KEY, 2 * count)
        self._bits_n = self._capacity * BITS_PER_KEY
        self._bits = bytearray(self._bits_n // 8 + 1)
        self._added = 0

    def _positions(self, key: str) -> list[int]:
        # Double hashing over the interpreter's own string hash: salted per process,
        # which a filter that lives and dies with the process does not mind.
        first, step = hash(key), hash((key, HASHES)) | 1
        n = self._bits_n
        return [(first + i * step) % n for i in range(HASHES)]

    def add(self, key: str) -> None:
        """``key`` may now have a row (told before anyone hears of its commit)."""
        bits = self._bits
        for p in self._positions(key):
            bits[p >> 3] |= 1 << (p & 7)
        self._added += 1

    def absent(self, key: str) -> bool:
        """True only when ``key`` certainly has no row."""
        if self._added > self._capacity:
            return False
        bits = self._bits
        return any(not bits[p >> 3] & (1 << (p & 7)) for p in self._positions(key))
