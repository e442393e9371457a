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


def new_ulid(ms: int | None = None) -> str:
    """A fresh ULID from the wall clock (or ``ms``) and the OS random source (edge helper)."""
    return encode_ulid(time.time_ns() // 1_000_000 if ms is None else ms, _ENTROPY.take())


class UlidSequence:
    """ULIDs that sort in the order they were made (ULID's monotonic rule): within one
    millisecond, or if the clock steps back, the next id is the last one plus one.

    Only a new millisecond reads fresh entropy; within one, an id costs an
    increment and three table lookups: the first 20 digits (the time and the
    high 50 bits of the randomness) are kept as a string until the low 30 bits
    carry. Ids stay unique (each is the last plus one, or starts a later
    millisecond) and sorted; unlike :func:`new_ulid`, the next id of the same
    millisecond is predictable, so use a sequence only where ids are not
    secrets (journal event ids, task ids).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ms = -1
        self._random = 0
        self._prefix = ""

    def next(self, ms: int | None = None) -> str:
        """A new id, greater than every id this sequence made before."""
        now = time.time_ns() // 1_000_000 if ms is None else ms
        with self._lock:
            if now <= self._ms and self._random < _RANDOM_MAX:
                value = self._random + 1
                self._random = value
                low = value & _LOW_MASK
                if not low:  # the low 30 bits carried: the kept digits changed
                    self._prefix = encode_ulid(self._ms, value.to_bytes(10, "big"))[:20]
                return (
                    self._prefix + _PAIRS[low >> 20] + _PAIRS[(low >> 10) & 1023]
                    + _PAIRS[low & 1023]
                )  # fmt: skip
            self._ms = max(now, self._ms + 1) if now <= self._ms else now
            self._random = int.from_bytes(_ENTROPY.take(), "big") >> 1  # room to count up
            ulid = encode_ulid(self._ms, self._random.to_bytes(10, "big"))
            self._prefix = ulid[:20]
            return ulid

    def reset(self) -> None:
        """Start over from fresh entropy (after fork: a child must not repeat the parent)."""
        self._lock = threading.Lock()
        self._ms, self._random, self._prefix = -1, 0, ""


_RANDOM_MAX = (1 << 80) - 1
_LOW_MASK = (1 << 30) - 1


def is_ulid(value: str) -> bool:
    """True when ``value`` is a canonical (uppercase) ULID."""
    return bool(_ULID_RE.match(value))
