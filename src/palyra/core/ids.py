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


def encode_ulid(ms: int, entropy: bytes) -> str:
    """Encode a 48-bit millisecond timestamp and 80 bits of entropy as a ULID."""
    if not 0 <= ms < 1 << 48:
        raise ValueError("ULID timestamp out of range")
    if len(entropy) != 10:
        raise ValueError("ULID entropy must be 10 bytes")
    # 26 digits = 130 bits (the top two are zero), ten bits (two digits) per
    # lookup, over three machine-sized ints rather than one 130-bit int (whose
    # every shift makes a new big int). base64.b32encode is pure Python on 3.11
    # and measured slower.
    return _time_digits(ms) + _random_digits(int.from_bytes(entropy, "big"))


def _time_digits(ms: int) -> str:
    # The first 10 digits: the 48-bit time in 50 bits.
    p = _PAIRS
    return (p[ms >> 40] + p[(ms >> 30) & 1023] + p[(ms >> 20) & 1023]
            + p[(ms >> 10) & 1023] + p[ms & 1023])  # fmt: skip


def _random_digits(value: int) -> str:
    # The last 16 digits: 80 bits of randomness, as two 40-bit halves.
    p, hi, lo = _PAIRS, value >> 40, value & _HALF_MASK
    return (p[hi >> 30] + p[(hi >> 20) & 1023] + p[(hi >> 10) & 1023] + p[hi & 1023]
            + p[lo >> 30] + p[(lo >> 20) & 1023] + p[(lo >> 10) & 1023] + p[lo & 1023])  # fmt: skip


_HALF_MASK = (1 << 40) - 1


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
    """ULIDs that sort in the order they were made (ULID's monotonic rule): each id is
    the last one plus one, in the clock's millisecond (or the last one's, if the
    clock stepped back).

    Entropy is read once, for the first id (and after :meth:`reset`, or if the
    80-bit counter ever ran out); from there the random part counts up across
    milliseconds too. An id then costs an increment and three table lookups,
    plus five when the millisecond changes: the time's 10 digits and the next 10
    (the high 50 bits of the counter) are kept as strings until they change.
    Ids stay unique (each is the last plus one, so two ids of one millisecond
    never share a counter value) and sorted; unlike :func:`new_ulid`, the next
    id is predictable, so use a sequence only where ids are not secrets
    (journal event ids, task ids). Processes sharing a journal draw their own
    random starts, 2**79 values apart on average.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ms = -1
        self._random = _RANDOM_MAX  # no id yet: the first one draws entropy
        self._time = ""  # _time_digits(self._ms)
        self._high = ""  # the counter's high 50 bits as 10 digits

    def next(self, ms: int | None = None) -> str:
        """A new id, greater than every id this sequence made before."""
        now = time.time_ns() // 1_000_000 if ms is None else ms
        with self._lock:
            if self._random < _RANDOM_MAX:
                value = self._random + 1
                self._random = value
                low = value & _LOW_MASK
                if not low:  # the low 30 bits carried: the kept digits changed
                    self._high = _random_digits(value)[:10]
                if now > self._ms:
                    self._ms, self._time = now, _time_digits(now)
                return (
                    self._time + self._high + _PAIRS[low >> 20] + _PAIRS[(low >> 10) & 1023]
                    + _PAIRS[low & 1023]
                )  # fmt: skip
            # The first id, or the counter ran out: fresh entropy, in a millisecond
            # after the last id's so the new (perhaps lower) counter still sorts after.
            self._ms = max(now, self._ms + 1)
            self._random = int.from_bytes(_ENTROPY.take(), "big") >> 1  # room to count up
            self._time, digits = _time_digits(self._ms), _random_digits(self._random)
            self._high = digits[:10]
            return self._time + digits

    def reset(self) -> None:
        """Start over from fresh entropy (after fork: a child must not repeat the parent)."""
        self._lock = threading.Lock()
        self._ms, self._random, self._time, self._high = -1, _RANDOM_MAX, "", ""


_RANDOM_MAX = (1 << 80) - 1
_LOW_MASK = (1 << 30) - 1


def is_ulid(value: str) -> bool:
    """True when ``value`` is a canonical (uppercase) ULID."""
    return bool(_ULID_RE.match(value))
