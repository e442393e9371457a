"""ULID identifiers: 26 Crockford base32 characters, time-ordered.

:func:`encode_ulid` and :func:`is_ulid` are pure: the caller passes the time and
the randomness, so ids are reproducible in tests. :func:`new_ulid` is the edge
helper that reads the clock and the OS random source.
"""

from __future__ import annotations

import os
import re
import threading
import time

_ULID_RE = re.compile(r"^[0-7][0-9A-HJKMNP-TV-Z]{25}$")
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = tuple(a + b for a in _CROCKFORD for b in _CROCKFORD)
_SHIFTS = tuple(range(120, -1, -10))


def encode_ulid(ms: int, entropy: bytes) -> str:
    """Encode a 48-bit millisecond timestamp and 80 bits of entropy as a ULID."""
    if not 0 <= ms < 1 << 48:
        raise ValueError("ULID timestamp out of range")
    if len(entropy) != 10:
        raise ValueError("ULID entropy must be 10 bytes")
    # 26 digits = 130 bits (the top two are zero), ten bits (two digits) per
    # lookup. (base64.b32encode is pure Python on 3.11 and measured slower.)
    value = (ms << 80) | int.from_bytes(entropy, "big")
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in _SHIFTS])


class _EntropyPool:
    """ULID entropy from the OS random source, read 4 KiB at a time.

    One ``os.urandom`` call per id showed up as a top cost under load: each
    syscall drops the GIL and another thread then holds it. Ids are not
    secrets; tokens take their secret part from :mod:`secrets`, never from here.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buffer = b""
        self._offset = 0

    def take(self) -> bytes:
        with self._lock:
            if self._offset + 10 > len(self._buffer):
                self._buffer, self._offset = os.urandom(4096), 0
            chunk = self._buffer[self._offset : self._offset + 10]
            self._offset += 10
            return chunk

    def reset(self) -> None:
        """Drop buffered bytes (after fork, so parent and child never share entropy)."""
        self._lock = threading.Lock()
        self._buffer, self._offset = b"", 0


_ENTROPY = _EntropyPool()
os.register_at_fork(after_in_child=_ENTROPY.reset)


def ulid_entropy() -> bytes:
    """10 fresh random bytes for :func:`encode_ulid` (edge helper)."""
    return _ENTROPY.take()


def new_ulid(ms: int | None = None) -> str:
    """A fresh ULID from the wall clock (or ``ms``) and the OS random source (edge helper)."""
    return encode_ulid(time.time_ns() // 1_000_000 if ms is None else ms, _ENTROPY.take())


class UlidSequence:
    """ULIDs that sort in the order they were made (ULID's monotonic rule): within one
    millisecond, or if the clock steps back, the next id is the last one plus one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ms = -1
        self._random = 0

    def next(self, ms: int | None = None) -> str:
        """A new id, greater than every id this sequence made before."""
        now = time.time_ns() // 1_000_000 if ms is None else ms
        with self._lock:
            if now <= self._ms and self._random < (1 << 80) - 1:
                self._random += 1
            else:
                self._ms = max(now, self._ms + 1) if now <= self._ms else now
                self._random = int.from_bytes(_ENTROPY.take(), "big") >> 1  # room to count up
            return encode_ulid(self._ms, self._random.to_bytes(10, "big"))


def is_ulid(value: str) -> bool:
    """True when ``value`` is a canonical (uppercase) ULID."""
    return bool(_ULID_RE.match(value))
