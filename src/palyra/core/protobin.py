"""Fast protobuf binary encoding of betterproto2 messages (``bytes(message)``).

betterproto2's ``__bytes__`` looks each field's default up through
``warnings.catch_warnings`` on every call; for the gRPC gateway that was the
largest cost of each streamed tape event. This encoder follows the same rules
(skip fields equal to their default, packed repeated scalars, map entries,
unknown fields appended) over per-class cached plans of field writers specialised by type,
compiled per class into one straight-line function, and is checked to give identical bytes
(tests/core/test_protobin.py).
"""

from __future__ import annotations

import functools
import struct
import typing
from collections.abc import Callable
from typing import Any

import betterproto2

_VARINT = frozenset({"enum", "bool", "int32", "int64", "uint32", "uint64"})
_ZIGZAG = frozenset({"sint32", "sint64"})
_FIXED32 = {"float": "<f", "fixed32": "<I", "sfixed32": "<i"}
_FIXED64 = {"double": "<d", "fixed64": "<Q", "sfixed64": "<q"}
_PACKED = _VARINT | _ZIGZAG | frozenset(_FIXED32) | frozenset(_FIXED64)


_SMALL = tuple(bytes((i,)) for i in range(0x80))


def _varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _SMALL[value]
    if value < 0:
        value += 1 << 64
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


Writer = Callable[[bytearray, Any], None]


def _payload_fn(proto_type: str) -> Callable[[Any], bytes]:
    """The encoder of one value's payload (no tag, no length prefix)."""
    if proto_type in _VARINT:
        return lambda value: _varint(int(value))
    if proto_type == "string":
        return lambda value: typing.cast(str, value).encode("utf-8")
    if proto_type == "message":
        return encode_binary
    if proto_type == "bytes":
        return bytes
    if proto_type in _ZIGZAG:
        return lambda value: _varint(value << 1 if value >= 0 else (value << 1) ^ ~0)
    if proto_type in _FIXED32:
        return struct.Struct(_FIXED32[proto_type]).pack
    return struct.Struct(_FIXED64[proto_type]).pack


def _single_writer(tag: bytes, proto_type: str) -> Writer:
    """Appends ``tag`` + one value (length-prefixed for wire type 2)."""
    payload = _payload_fn(proto_type)
    if _wire_type(proto_type) != 2:
        def write_scalar(out: bytearray, value: Any) -> None:
            out += tag
            out += payload(value)
        return write_scalar

    def write_delimited(out: bytearray, value: Any) -> None:
        data = payload(value)
        out += tag
        out += _varint(len(data))
        out += data
    return write_delimited


def _writer(fm: Any, tag: bytes) -> Writer:
    proto_type = fm.proto_type
    if fm.repeated:
        if proto_type in _PACKED:
            payload = _payload_fn(proto_type)

            def write_packed(out: bytearray, value: Any) -> None:
                packed = b"".join(payload(item) for item in value)
                out += tag
                out += _varint(len(packed))
                out += packed
            return write_packed
        single = _single_writer(tag, proto_type)

        def write_repeated(out: bytearray, value: Any) -> None:
            for item in value:
                single(out, item)
        return write_repeated
    if fm.map_meta:
        key_meta, value_meta = fm.map_meta
        write_key = _single_writer(_varint((1 << 3) | _wire_type(key_meta.proto_type)),
                                   key_meta.proto_type)
        write_value = _single_writer(_varint((2 << 3) | _wire_type(value_meta.proto_type)),
                                     value_meta.proto_type)

        def write_map(out: bytearray, value: Any) -> None:
            for k, v in value.items():
                entry = bytearray()
                write_key(entry, k)
                write_value(entry, v)
                out += tag
                out += _varint(len(entry))
                out += entry
        return write_map
    return _single_writer(tag, proto_type)


@functools.cache
def _plan(cls: type[Any]) -> tuple[tuple[str, Any, Writer], ...] | None:
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
        plan.append((name, default, _writer(fm, tag)))
    return tuple(plan)


def _field_source(i: int, name: str, default: Any, fm: Any, plain: bool) -> list[str]:
    """Source lines encoding one field of the compiled encoder (see :func:`_compiled`)."""
    proto_type = fm.proto_type
    # Skip a field equal to its default, exactly as the plan loop did.
    if fm.repeated or fm.map_meta:
        test = "v"  # an empty list or map is the default; None too
    elif default is None:
        test = "v is not None"
    elif plain and ((default == "" and proto_type == "string")
                    or (default == 0 and proto_type in _VARINT)
                    or (default == b"" and proto_type == "bytes")):
        test = "v"  # falsy is exactly "None or the default" for these types
    else:
        test = f"v is not None and v != D{i}"
    lines = [f"    v = m.{name}", f"    if {test}:"]
    if plain and proto_type in _VARINT:
        lines += [f"        out += T{i}", "        x = int(v)",
                  "        out += SMALL[x] if 0 <= x < 128 else varint(x)"]
    elif plain and proto_type in ("string", "bytes", "message"):
        # A message field of the declared class calls that class's compiled body
        # directly (E{i}, bound on first use), without the bytes() copy per level.
        value = {"string": "v.encode()", "bytes": "bytes(v)",
                 "message": f"E{i}(v) if type(v) is K{i} else encode(v)"}[proto_type]
        lines += [f"        b = {value}", "        n = len(b)", f"        out += T{i}",
                  "        out += SMALL[n] if n < 128 else varint(n)", "        out += b"]
    elif fm.repeated and proto_type in ("string", "message"):
        value = {"string": "x.encode()",
                 "message": f"E{i}(x) if type(x) is K{i} else encode(x)"}[proto_type]
        lines += ["        for x in v:", f"            b = {value}", "            n = len(b)",
                  f"            out += T{i}",
                  "            out += SMALL[n] if n < 128 else varint(n)", "            out += b"]
    else:
        lines.append(f"        W{i}(out, v)")
    return lines


def _lazy_body(namespace: dict[str, Any], key: str, cls: type[betterproto2.Message]) -> Callable[[Any], Any]:
    """A stand-in for ``cls``'s compiled body that binds the real one on its first call.

    Binding at compile time would recurse forever on self-referencing messages.
    """
    def first_call(message: Any) -> Any:
        body = _body(cls)
        namespace[key] = body
        return body(message)
    return first_call


@functools.cache
def _body(cls: type[betterproto2.Message]) -> Callable[[Any], bytes | bytearray]:
    """``cls``'s encoder returning a ``bytearray`` (no copy), or ``bytes`` for a fallback."""
    compiled = _compiled_body(cls)
    return compiled if compiled is not None else bytes


def _compiled_body(cls: type[betterproto2.Message]) -> Callable[[Any], bytearray] | None:
    """One straight-line encoder function per message class, built from its plan.

    The plan loop paid, per field, a tuple unpack, a ``getattr`` by name, a default
    comparison and a closure call; streamed tape events have ~20 fields (most of
    them unset oneof members), so that loop was most of their encoding time. The
    compiled function reads each attribute directly and inlines the writers of
    the common types (nested and repeated messages included); anything else still
    goes through the plan's writer.
    """
    plan = _plan(cls)
    if plan is None:
        return None
    meta = typing.cast(Any, cls)._betterproto
    namespace: dict[str, Any] = {"SMALL": _SMALL, "varint": _varint, "encode": encode_binary}
    body = ["def encode_compiled(m):", "    out = bytearray()"]
    for i, (name, default, write) in enumerate(plan):
        fm = meta.meta_by_field_name[name]
        if not name.isidentifier():
            return None
        plain = not fm.repeated and not fm.map_meta
        tag = _varint((fm.number << 3) | _wire_type(fm.proto_type))
        namespace.update({f"D{i}": default, f"T{i}": tag, f"W{i}": write})
        if fm.proto_type == "message" and not fm.map_meta:
            field_cls = meta.cls_by_field[name]
            namespace.update({f"K{i}": field_cls,
                              f"E{i}": _lazy_body(namespace, f"E{i}", field_cls)})
        body += _field_source(i, name, default, fm, plain)
    body += ["    unknown = getattr(m, '_unknown_fields', b'')",
             "    if unknown:", "        out += unknown", "    return out"]
    exec("\n".join(body), namespace)  # the source is built above from field metadata only
    return typing.cast(Callable[[Any], bytearray], namespace["encode_compiled"])


@functools.cache
def _compiled(cls: type[betterproto2.Message]) -> Callable[[Any], bytes] | None:
    """``cls``'s compiled encoder returning ``bytes``, or ``None`` if it has no plan."""
    if _plan(cls) is None:
        return None
    body = _body(cls)
    return lambda message: bytes(body(message))


def encode_binary(message: betterproto2.Message) -> bytes:
    """``bytes(message)``, fast."""
    encode = _compiled(type(message))
    if encode is None:
        return bytes(message)
    return encode(message)
