"""Fast protobuf binary encoding and decoding of betterproto2 messages (``bytes(m)``, ``parse``).

betterproto2's ``__bytes__`` looks each field's default up through
``warnings.catch_warnings`` on every call; for the gRPC gateway that was the
largest cost of each streamed tape event. This encoder follows the same rules
(skip fields equal to their default, packed repeated scalars, map entries,
unknown fields appended) over per-class cached plans of field writers specialised by type,
compiled per class into one straight-line function, and is checked to give identical bytes
(tests/core/test_protobin.py).

:func:`decode_binary` is ``cls.parse(data)`` the same way: a reader per field key (number
and wire type) instead of betterproto2's generic per-field path over a ``BytesIO``; it
gives equal messages and leaves anything unusual (wrapper or map fields, a known field
with an unexpected wire type, truncated or invalid input) to betterproto2 itself, so
errors are betterproto2's.
"""

from __future__ import annotations

import functools
import struct
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import betterproto2

M = TypeVar("M", bound=betterproto2.Message)
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
    if value < 0x4000:  # lengths of most nested messages and strings: no loop
        return bytes((value & 0x7F | 0x80, value >> 7))
    if value < 0x200000:
        return bytes((value & 0x7F | 0x80, value >> 7 & 0x7F | 0x80, value >> 14))
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


# -- decoding ---------------------------------------------------------------------------------

class _Fallback(Exception):
    """The fast decoder met something it leaves to betterproto2 (bad input, odd wire types)."""


Reader = Callable[[Any, bytes, int, int], tuple[Any, int]]
"""Reads one field's value at ``pos`` (just after its key): the value and the new pos."""


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    byte = data[pos]
    if byte < 0x80:
        return byte, pos + 1
    result = byte & 0x7F
    shift = 7
    pos += 1
    while True:
        byte = data[pos]
        result |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise _Fallback("varint too long")


def _varint_convert(proto_type: str, field_cls: Any) -> Callable[[int], Any] | None:
    """betterproto2's ``_postprocess_single`` for a varint of ``proto_type`` (None: as is)."""
    if proto_type in ("int32", "int64", "enum"):
        bits = 32 if proto_type == "int32" else 64
        mask, sign = (1 << bits) - 1, 1 << (bits - 1)
        if proto_type == "enum":
            return lambda v: field_cls(((v & mask) ^ sign) - sign)
        return lambda v: ((v & mask) ^ sign) - sign if v > 0x7FFFFFFF else v
    if proto_type in ("uint32", "uint64"):
        mask = (1 << (32 if proto_type == "uint32" else 64)) - 1
        return lambda v: v & mask
    if proto_type in ("sint32", "sint64"):
        mask = (1 << (32 if proto_type == "sint32" else 64)) - 1
        return lambda v: ((v & mask) >> 1) ^ (-((v & mask) & 1))
    if proto_type == "bool":
        return lambda v: v > 0
    raise _Fallback(proto_type)


def _readers(cls: type[betterproto2.Message]) -> dict[int, tuple[str, bool, Reader]] | None:
    """Field key (number and wire type) -> (name, repeated, reader); None to use betterproto2."""
    meta = typing.cast(Any, cls)._betterproto
    readers: dict[int, tuple[str, bool, Reader]] = {}
    for name, fm in meta.meta_by_field_name.items():
        if fm.unwrap is not None or fm.map_meta or fm.proto_type == "map":
            return None
        pt, repeated = fm.proto_type, bool(fm.repeated)
        field_cls = meta.cls_by_field.get(name)
        try:
            for wire, reader in _field_readers(pt, field_cls, repeated):
                readers[(fm.number << 3) | wire] = (name, repeated, reader)
        except _Fallback:
            return None
    return readers


def _field_readers(pt: str, field_cls: Any, repeated: bool) -> list[tuple[int, Reader]]:
    """The readers of one field by wire type (a packed repeated scalar takes two)."""
    if pt in _VARINT or pt in _ZIGZAG:
        convert = _varint_convert(pt, field_cls)

        def read_varint(m: Any, data: bytes, pos: int, end: int) -> tuple[Any, int]:
            value, pos = _read_varint(data, pos)
            return (convert(value) if convert is not None else value), pos

        out: list[tuple[int, Reader]] = [(0, read_varint)]
        if repeated:
            def read_packed_varints(m: Any, data: bytes, pos: int, end: int) -> tuple[Any, int]:
                n, pos = _read_varint(data, pos)
                stop = pos + n
                if stop > end:
                    raise _Fallback("truncated")
                values = []
                while pos < stop:
                    value, pos = _read_varint(data, pos)
                    values.append(convert(value) if convert is not None else value)
                if pos != stop:
                    raise _Fallback("packed overrun")
                return _Packed(values), pos
            out.append((2, read_packed_varints))
        return out
    if pt in _FIXED32 or pt in _FIXED64:
        size = 4 if pt in _FIXED32 else 8
        unpack = struct.Struct(_FIXED32.get(pt) or _FIXED64[pt]).unpack_from

        def read_fixed(m: Any, data: bytes, pos: int, end: int) -> tuple[Any, int]:
            if pos + size > end:
                raise _Fallback("truncated")
            return unpack(data, pos)[0], pos + size

        out = [(1 if size == 8 else 5, read_fixed)]
        if repeated:
            def read_packed_fixed(m: Any, data: bytes, pos: int, end: int) -> tuple[Any, int]:
                n, pos = _read_varint(data, pos)
                stop = pos + n
                if stop > end or n % size:
                    raise _Fallback("truncated")
                values = [unpack(data, p)[0] for p in range(pos, stop, size)]
                return _Packed(values), stop
            out.append((2, read_packed_fixed))
        return out
    if pt in ("string", "bytes", "message"):
        if pt == "string":
            def make(chunk: bytes) -> Any:
                return chunk.decode("utf-8")
        elif pt == "bytes":
            def make(chunk: bytes) -> Any:
                return chunk
        else:
            sub = field_cls

            def make(chunk: bytes) -> Any:
                return decode_binary(sub, chunk)

        def read_delimited(m: Any, data: bytes, pos: int, end: int) -> tuple[Any, int]:
            n, pos = _read_varint(data, pos)
            stop = pos + n
            if stop > end:
                raise _Fallback("truncated")
            return make(data[pos:stop]), stop

        return [(2, read_delimited)]
    raise _Fallback(pt)


class _Packed(list):  # type: ignore[type-arg]
    """Values of one packed run (extend the field, do not append)."""


def _skip(data: bytes, pos: int, wire: int, end: int) -> int:
    """The position after an unknown field's value."""
    if wire == 0:
        return _read_varint(data, pos)[1]
    if wire == 1:
        pos += 8
    elif wire == 2:
        n, pos = _read_varint(data, pos)
        pos += n
    elif wire == 5:
        pos += 4
    else:
        raise _Fallback("group or bad wire type")
    if pos > end:
        raise _Fallback("truncated")
    return pos


@functools.cache
def _decoder(cls: type[betterproto2.Message]) -> Callable[[bytes], Any] | None:
    readers = _readers(cls)
    if readers is None:
        return None
    names = typing.cast(Any, cls)._betterproto.field_name_by_number

    def decode(data: bytes) -> Any:
        message = cls()
        pos, end = 0, len(data)
        unknown = b""
        while pos < end:
            start = pos
            key, pos = _read_varint(data, pos)
            entry = readers.get(key)
            if entry is None:
                if (key >> 3) in names or key >> 3 == 0:
                    raise _Fallback("known field, unexpected wire type")
                pos = _skip(data, pos, key & 7, end)
                unknown += data[start:pos]
                continue
            name, repeated, read = entry
            value, pos = read(message, data, pos, end)
            if repeated:
                if type(value) is _Packed:
                    getattr(message, name).extend(value)
                else:
                    getattr(message, name).append(value)
            else:
                setattr(message, name, value)
        if unknown:
            message._unknown_fields = unknown
        return message

    return decode


def decode_binary(cls: type[M], data: bytes) -> M:
    """``cls.parse(data)``, fast; anything unusual is left to betterproto2 itself."""
    decode = _decoder(cls)
    if decode is not None:
        try:
            return typing.cast(M, decode(bytes(data)))
        except (_Fallback, IndexError, UnicodeDecodeError, ValueError):
            pass
    return cls.parse(data)


# Public names for encoders built outside this module (the app's RunStream tape
# writer assembles a TapeEvent's bytes itself from these pieces).
SMALL_VARINTS = _SMALL
"""``SMALL_VARINTS[n]`` is the varint of ``0 <= n < 128`` (one byte)."""
varint = _varint
body_encoder = _body
