"""Fast protobuf binary encoding of betterproto2 messages (``bytes(message)``).

betterproto2's ``__bytes__`` looks each field's default up through
``warnings.catch_warnings`` on every call; for the gRPC gateway that was the
largest cost of each streamed tape event. This encoder follows the same rules
(skip fields equal to their default, packed repeated scalars, map entries,
unknown fields appended) over per-class cached plans, and is checked to give
identical bytes (tests/core/test_protobin.py).
"""

from __future__ import annotations

import functools
import struct
import typing
from typing import Any

import betterproto2

_VARINT = frozenset({"enum", "bool", "int32", "int64", "uint32", "uint64"})
_ZIGZAG = frozenset({"sint32", "sint64"})
_FIXED32 = {"float": "<f", "fixed32": "<I", "sfixed32": "<i"}
_FIXED64 = {"double": "<d", "fixed64": "<Q", "sfixed64": "<q"}
_PACKED = _VARINT | _ZIGZAG | frozenset(_FIXED32) | frozenset(_FIXED64)


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _wire_type(proto_type: str) -> int:
    if proto_type in _VARINT or proto_type in _ZIGZAG:
        return 0
    if proto_type in _FIXED64:
        return 1
    if proto_type in _FIXED32:
        return 5
    return 2


@functools.cache
def _plan(cls: type[Any]) -> tuple[tuple[Any, ...], ...] | None:
    meta = typing.cast(Any, cls)._betterproto
    probe = cls()
    plan = []
    for name, fm in meta.meta_by_field_name.items():
        if fm.unwrap is not None or (fm.map_meta and fm.map_meta[1].unwrap is not None):
            return None
        default = probe._get_field_default(name)
        if fm.repeated and fm.proto_type in _PACKED:
            tag = _varint((fm.number << 3) | 2)
        else:
            tag = _varint((fm.number << 3) | _wire_type(fm.proto_type))
        plan.append((name, fm, default, tag))
    return tuple(plan)


def encode_binary(message: betterproto2.Message) -> bytes:
    """``bytes(message)``, fast."""
    plan = _plan(type(message))
    if plan is None:
        return bytes(message)
    out = bytearray()
    for name, fm, default, tag in plan:
        value = getattr(message, name)
        if value is None or value == default:
            continue
        if fm.repeated:
            if fm.proto_type in _PACKED:
                packed = b"".join(_payload(fm.proto_type, item) for item in value)
                out += tag + _varint(len(packed)) + packed
            else:
                for item in value:
                    out += _field(tag, fm.proto_type, item)
        elif fm.map_meta:
            key_meta, value_meta = fm.map_meta
            key_tag = _varint((1 << 3) | _wire_type(key_meta.proto_type))
            value_tag = _varint((2 << 3) | _wire_type(value_meta.proto_type))
            for k, v in value.items():
                entry = (_field(key_tag, key_meta.proto_type, k)
                         + _field(value_tag, value_meta.proto_type, v))
                out += tag + _varint(len(entry)) + entry
        else:
            out += _field(tag, fm.proto_type, value)
    out += getattr(message, "_unknown_fields", b"")
    return bytes(out)


def _field(tag: bytes, proto_type: str, value: Any) -> bytes:
    payload = _payload(proto_type, value)
    if _wire_type(proto_type) == 2:
        return tag + _varint(len(payload)) + payload
    return tag + payload


def _payload(proto_type: str, value: Any) -> bytes:
    if proto_type in _VARINT:
        return _varint(int(value))
    if proto_type == "string":
        return typing.cast(str, value).encode("utf-8")
    if proto_type == "message":
        return encode_binary(value)
    if proto_type == "bytes":
        return bytes(value)
    if proto_type in _ZIGZAG:
        return _varint(value << 1 if value >= 0 else (value << 1) ^ ~0)
    if proto_type in _FIXED32:
        return struct.pack(_FIXED32[proto_type], value)
    return struct.pack(_FIXED64[proto_type], value)
