"""ULID identifiers: 26 Crockford base32 characters, time-ordered.

Pure functions: the caller passes the time and the randomness, so ids are
reproducible in tests.
"""

from __future__ import annotations

import os
import re
import time

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = tuple(a + b for a in _CROCKFORD for b in _CROCKFORD)
_SHIFTS = tuple(range(120, -1, -10))
_ULID_RE = re.compile(r"^[0-7][0-9A-HJKMNP-TV-Z]{25}$")


def encode_ulid(ms: int, entropy: bytes) -> str:
    """Encode a 48-bit millisecond timestamp and 80 bits of entropy as a ULID."""
    if not 0 <= ms < 1 << 48:
        raise ValueError("ULID timestamp out of range")
    if len(entropy) != 10:
        raise ValueError("ULID entropy must be 10 bytes")
    # 26 digits = 130 bits (the top two are zero), ten bits (two digits) per lookup.
    value = (ms << 80) | int.from_bytes(entropy, "big")
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in _SHIFTS])


def new_ulid() -> str:
    """A fresh ULID from the wall clock and the OS random source (edge helper)."""
    return encode_ulid(time.time_ns() // 1_000_000, os.urandom(10))


def is_ulid(value: str) -> bool:
    """True when ``value`` is a canonical (uppercase) ULID."""
    return bool(_ULID_RE.match(value))
