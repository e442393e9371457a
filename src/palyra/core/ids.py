"""ULID identifiers: 26 Crockford base32 characters, time-ordered.

Pure functions: the caller passes the time and the randomness, so ids are
reproducible in tests.
"""

from __future__ import annotations

import base64
import os
import re
import time

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_TO_CROCKFORD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", _CROCKFORD.encode())
_ULID_RE = re.compile(r"^[0-7][0-9A-HJKMNP-TV-Z]{25}$")


def encode_ulid(ms: int, entropy: bytes) -> str:
    """Encode a 48-bit millisecond timestamp and 80 bits of entropy as a ULID."""
    if not 0 <= ms < 1 << 48:
        raise ValueError("ULID timestamp out of range")
    if len(entropy) != 10:
        raise ValueError("ULID entropy must be 10 bytes")
    # 128 bits in 20 bytes = 32 base32 digits, of which the last 26 are the
    # ULID (the first 6 cover only zero padding); translate RFC 4648 → Crockford.
    value = (ms << 80) | int.from_bytes(entropy, "big")
    return base64.b32encode(value.to_bytes(20, "big"))[6:].translate(_TO_CROCKFORD).decode()


def new_ulid() -> str:
    """A fresh ULID from the wall clock and the OS random source (edge helper)."""
    return encode_ulid(time.time_ns() // 1_000_000, os.urandom(10))


def is_ulid(value: str) -> bool:
    """True when ``value`` is a canonical (uppercase) ULID."""
    return bool(_ULID_RE.match(value))
