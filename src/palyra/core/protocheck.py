"""Strict protobuf wire-format validation against a generated message type.

betterproto2's parser is lenient: it accepts truncated length prefixes, wire
types that do not match the field (a length-delimited blob in a ``uint32``
field becomes a list), invalid UTF-8 in strings and unknown fields. A request
that arrives that way would be acted on and journaled. This checker walks the
bytes once, against the same generated field metadata, and names the first
problem, so the gateway can refuse it as ``MALFORMED_REQUEST`` before anything
runs. Unknown field numbers are refused too: the daemon speaks exactly its own
spec, and a silently dropped field is worse than a clear error.
"""

from __future__ import annotations

import functools
from typing import Any

_VARINT_TYPES = frozenset(
    {"enum", "bool", "int32", "int64", "uint32", "uint64", "sint32", "sint64"}
)
_FIXED64_TYPES = frozenset({"double", "fixed64", "sfixed64"})
_FIXED32_TYPES = frozenset({"float", "fixed32", "sfixed32"})
_PACKABLE = _VARINT_TYPES | _FIXED64_TYPES | _FIXED32_TYPES
_MAX_DEPTH = 64  # far beyond any message in the spec; stops stack exhaustion


class WireFormatError(ValueError):
    """Raised when bytes are not a valid encoding of the expected message."""


def _wire_type(proto_type: str) -> int:
    if proto_type in _VARINT_TYPES:
        return 0
    if proto_type in _FIXED64_TYPES:
        return 1
    if proto_type in _FIXED32_TYPES:
        return 5
    return 2


_SCALAR, _STRING, _MESSAGE, _MAP, _PACKED_OK, _OTHER = range(6)
"""How a field's value is checked (see :func:`_plan`)."""


@functools.cache
def _fields(cls: Any) -> dict[int, tuple[str, Any, Any]]:
    """``number -> (name, metadata, class of a message-typed value)``.

    For a map field the class is that of the map's *values* (betterproto2
    files it under ``"<name>.value"``).
    """
    meta = cls._betterproto
    classes = meta.cls_by_field
    return {
        fm.number: (name, fm, classes.get(f"{name}.value" if fm.map_meta else name))
        for name, fm in meta.meta_by_field_name.items()
    }


@functools.cache
def _plan(cls: Any) -> dict[int, tuple[str, int, int, Any, Any]]:
    """``number -> (name, expected wire type, how to check, metadata, value class)``,
    worked out once per class: the walk then does one look-up per field and builds a
    field's path only to name an error (it runs on every request the gateway reads)."""
    plan: dict[int, tuple[str, int, int, Any, Any]] = {}
    for number, (name, fm, sub_cls) in _fields(cls).items():
        expected = _wire_type(fm.proto_type)
        if fm.repeated and fm.proto_type in _PACKABLE:
            how = _PACKED_OK  # a scalar that may also arrive as a packed run
        elif expected != 2:
            how = _SCALAR
        elif fm.map_meta:
            how = _MAP
        elif fm.proto_type == "string":
            how = _STRING
        elif fm.proto_type == "message" and sub_cls is not None:
            how = _MESSAGE
        else:
            how = _OTHER  # bytes: any content
        plan[number] = (name, expected, how, fm, sub_cls)
    return plan


def _varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = 0
    for shift in range(0, 70, 7):
        if pos >= len(data):
            raise WireFormatError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if result >= 1 << 64:
                raise WireFormatError("varint exceeds 64 bits")
            return result, pos
    raise WireFormatError("varint longer than 10 bytes")


def _skip_scalar(data: memoryview, pos: int, wire: int) -> int:
    if wire == 0:
        return _varint(data, pos)[1]
    size = 8 if wire == 1 else 4
    if pos + size > len(data):
        raise WireFormatError("truncated fixed-width value")
    return pos + size


def _check_packed(data: memoryview, proto_type: str) -> None:
    wire = _wire_type(proto_type)
    pos = 0
    while pos < len(data):
        pos = _skip_scalar(data, pos, wire)


def _check_value(chunk: memoryview, proto_type: str, cls: Any, path: str, depth: int) -> None:
    """Validate one length-delimited payload of a known field."""
    if proto_type == "string":
        try:
            bytes(chunk).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise WireFormatError(f"{path}: string is not valid UTF-8") from exc
    elif proto_type == "message" and cls is not None:
        _check(chunk, cls, path, depth + 1)


def _check_map_entry(chunk: memoryview, fm: Any, path: str, depth: int, value_cls: Any) -> None:
    key_meta, value_meta = fm.map_meta
    pos = 0
    while pos < len(chunk):
        tag, pos = _varint(chunk, pos)
        number, wire = tag >> 3, tag & 7
        meta = key_meta if number == 1 else value_meta if number == 2 else None
        if meta is None:
            raise WireFormatError(f"{path}: map entry has unknown field {number}")
        if wire != _wire_type(meta.proto_type):
            raise WireFormatError(f"{path}: map entry field {number} has wire type {wire}")
        if wire == 2:
            length, pos = _varint(chunk, pos)
            if pos + length > len(chunk):
                raise WireFormatError(f"{path}: truncated map entry")
            sub_cls = value_cls if number == 2 else None
            _check_value(chunk[pos : pos + length], meta.proto_type, sub_cls, path, depth)
            pos += length
        else:
            pos = _skip_scalar(chunk, pos, wire)


def _check(data: memoryview, cls: Any, path: str, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise WireFormatError(f"{path}: nested too deeply")
    plan = _plan(cls)
    pos, size = 0, len(data)
    while pos < size:
        tag = data[pos]  # most tags are one byte; _varint reads the rest
        tag, pos = (tag, pos + 1) if tag < 0x80 else _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise WireFormatError(f"{path}: field number 0 is invalid")
        if wire not in (0, 1, 2, 5):
            raise WireFormatError(f"{path}: wire type {wire} is not supported (field {number})")
        known = plan.get(number)
        if known is None:
            raise WireFormatError(f"{path}: unknown field {number} for {cls.__name__}")
        name, expected, how, fm, sub_cls = known
        packed = how == _PACKED_OK and wire == 2
        if wire != expected and not packed:
            raise WireFormatError(f"{path}.{name}: wire type {wire}, expected {expected}")
        if wire != 2:
            pos = _skip_scalar(data, pos, wire)
            continue
        if pos < size and data[pos] < 0x80:
            length, pos = data[pos], pos + 1
        else:
            length, pos = _varint(data, pos)
        if pos + length > size:
            raise WireFormatError(
                f"{path}.{name}: length {length} runs past the end of the message")
        chunk = data[pos : pos + length]
        pos += length
        if how == _STRING:
            try:
                str(chunk, "utf-8")
            except UnicodeDecodeError as exc:
                raise WireFormatError(f"{path}.{name}: string is not valid UTF-8") from exc
        elif how == _MESSAGE:
            _check(chunk, sub_cls, f"{path}.{name}", depth + 1)
        elif packed:
            _check_packed(chunk, fm.proto_type)
        elif how == _MAP:
            _check_map_entry(chunk, fm, f"{path}.{name}", depth, sub_cls)


def check_wire_format(data: bytes, cls: type[Any]) -> None:
    """Raise :class:`WireFormatError` unless ``data`` strictly encodes a ``cls`` message."""
    _check(memoryview(data), cls, cls.__name__, 0)
