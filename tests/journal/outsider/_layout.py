"""Byte layouts, tags, hashes and canonical MessagePack, from docs/journal/format.md."""

from __future__ import annotations

import hashlib
import struct
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PublicKey,
)

GENESIS = bytes(32)
RECORD_TAG = b"palyra.journal.record.v2\0"
EVENT_TAG = b"palyra.journal.event.v1\0"
LINK_TAG = b"palyra.journal.link.v1\0"
CHECKPOINT_TAG = b"palyra.journal.checkpoint.v1\0"
SEAL_TAG = b"palyra.journal.bundle-seal.v1\0"
SEAL_TAG_V2 = b"palyra.journal.bundle-seal.v2\0"
PRUNED_KIND = "journal.pruned"
# Header fields of a format 2 event array, in order ("Record format 2").
EVENT_ARRAY_FIELDS = ("event_id", "run_id", "tape_seq", "kind", "actor", "ts_ms",
                      "principal", "device_id", "channel", "redactions", "payload")

assert len(RECORD_TAG) == 25 and len(EVENT_TAG) == 24  # the doc's sizes
assert len(LINK_TAG) == 23 and len(CHECKPOINT_TAG) == 29


# -- byte helpers ("Exact byte layout": big-endian) ---------------------------------------

def u16(n: int) -> bytes:
    return struct.pack(">H", n)


def u32(n: int) -> bytes:
    return struct.pack(">I", n)


def u64(n: int) -> bytes:
    return struct.pack(">Q", n)


def i64(n: int) -> bytes:
    return struct.pack(">q", n)


def text(s: str) -> bytes:
    b = s.encode("utf-8")
    return u32(len(b)) + b


def blob(b: bytes) -> bytes:
    return u32(len(b)) + b


def sha256(*parts: bytes) -> bytes:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return h.digest()


def link_hash(prev_global: bytes, last: int, record_hash: bytes) -> bytes:
    return sha256(LINK_TAG, prev_global, u64(last), record_hash)


# -- canonical MessagePack ("Canonical payload bytes") ------------------------------------

def canon(v: Any) -> bytes:
    """Canonical MessagePack of a JSON-model value, from the doc's rules."""
    if v is None:
        return b"\xc0"
    if v is True:
        return b"\xc3"
    if v is False:
        return b"\xc2"
    if isinstance(v, int):
        if v >= 0:
            if v < 0x80:
                return bytes([v])
            for tag, fmt, top in ((0xCC, ">B", 0xFF), (0xCD, ">H", 0xFFFF),
                                  (0xCE, ">I", 0xFFFFFFFF), (0xCF, ">Q", 2**64 - 1)):
                if v <= top:
                    return bytes([tag]) + struct.pack(fmt, v)
            raise ValueError("int too large")
        if v >= -32:
            return struct.pack(">b", v)
        for tag, fmt, low in ((0xD0, ">b", -(2**7)), (0xD1, ">h", -(2**15)),
                              (0xD2, ">i", -(2**31)), (0xD3, ">q", -(2**63))):
            if v >= low:
                return bytes([tag]) + struct.pack(fmt, v)
        raise ValueError("int too small")
    if isinstance(v, float):
        return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, str):
        b = v.encode("utf-8")
        return _header(len(b), 0xA0, 32, (0xD9, 0xDA, 0xDB)) + b
    if isinstance(v, (bytes, bytearray)):
        return _header(len(v), None, 0, (0xC4, 0xC5, 0xC6)) + bytes(v)
    if isinstance(v, (list, tuple)):
        return _header(len(v), 0x90, 16, (None, 0xDC, 0xDD)) + b"".join(canon(x) for x in v)
    if isinstance(v, dict):
        items = sorted((k.encode("utf-8"), x) for k, x in v.items())
        out = [_header(len(items), 0x80, 16, (None, 0xDE, 0xDF))]
        for kb, x in items:
            out.append(_header(len(kb), 0xA0, 32, (0xD9, 0xDA, 0xDB)) + kb)
            out.append(canon(x))
        return b"".join(out)
    raise TypeError(f"not a JSON-model value: {type(v).__name__}")


def _header(n: int, fix: int | None, fix_limit: int, tags: tuple[int | None, ...]) -> bytes:
    if fix is not None and n < fix_limit:
        return bytes([fix | n])
    for tag, fmt, top in zip(tags, (">B", ">H", ">I"), (0xFF, 0xFFFF, 0xFFFFFFFF), strict=True):
        if tag is not None and n <= top:
            return bytes([tag]) + struct.pack(fmt, n)
    raise ValueError("too long")


def event_hash(prev: bytes, position: int, ev: dict[str, Any], session_id: str,
               payload_bytes: bytes) -> bytes:
    """Format 1 `event_hash` ("Exact byte layout")."""
    parts = [EVENT_TAG, prev, u64(position), text(ev["event_id"]), text(session_id),
             text(ev["run_id"]), i64(ev["tape_seq"]), text(ev["kind"]), text(ev["actor"]),
             i64(ev["ts_ms"]), text(ev["principal"]), text(ev["device_id"]),
             text(ev["channel"]), u32(len(ev["redactions"]))]
    parts += [text(p) for p in ev["redactions"]]
    parts.append(blob(payload_bytes))
    return sha256(*parts)


def checkpoint_message(position: int, head: bytes, ts_ms: int) -> bytes:
    return CHECKPOINT_TAG + u64(position) + head + i64(ts_ms)


def seal_message(scope: str, session_id: str, head_position: int, head: bytes,
                 session_head: bytes, session_events: int, ts_ms: int,
                 lines_sha256: bytes | None = None) -> bytes:
    fields = (text(scope) + text(session_id) + u64(head_position) + head
              + session_head + u64(session_events) + i64(ts_ms))
    if lines_sha256 is None:  # versions 2..4
        return SEAL_TAG + fields
    return SEAL_TAG_V2 + fields + lines_sha256


def ed25519_ok(public_key: bytes, signature: bytes, message: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True

