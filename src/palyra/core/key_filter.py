"""Keys that may have a row, so that a look-up of a key that certainly has none reads none.

Two look-ups on a message's path almost always miss: its dedupe keys
(``channels/seen.py``) and a new conversation's session by its key
(``journal/read/entity_cache.py``). Each miss was an LMDB read on the event loop's
thread, and py-lmdb lets go of the GIL for it: the journal writer's thread takes the GIL
and commits a smaller group, and the loop waits to get it back.

:class:`KeyFilter` is a Bloom filter (rbloom's, in Rust, over the interpreter's salted
string hash: it lives and dies with the process) sized when it is built, for twice the
keys it starts with and at least :data:`MIN_KEYS`. A key it was never told of is
certainly absent; a key it may have seen costs the read it would have cost anyway. It
cannot forget a key or grow: once told of more keys than it was sized for, it answers
"maybe" for every key, as if it did not exist. Its owner rebuilds it when it must forget.
"""

from __future__ import annotations

from rbloom import Bloom

MIN_KEYS = 65_536  # about 128 KiB of bits at the false "maybe" rate below
FALSE_MAYBE = 1 / 2_000  # the share of absent keys answered "maybe" (then read)


class KeyFilter:
    """A Bloom filter of string keys with a fixed capacity."""

    __slots__ = ("_added", "_bloom", "_capacity")

    def __init__(self, count: int = 0) -> None:
        """Sized for ``count`` keys now held and as many again; add them next."""
        self._capacity = max(MIN_KEYS, 2 * count)
        self._bloom = Bloom(self._capacity, FALSE_MAYBE)
        self._added = 0

    def add(self, key: str) -> None:
        """``key`` may now have a row (tell it before its commit is answered: a "maybe"
        early only costs a read, a late one could wrongly call the key absent)."""
        self._bloom.add(key)
        self._added += 1

    def absent(self, key: str) -> bool:
        """True only when ``key`` certainly has no row."""
        return self._added <= self._capacity and key not in self._bloom
