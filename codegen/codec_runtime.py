"""The shared half of the generated codecs: the pieces every message's code calls.

``python -m codegen`` copies this file, under a banner, to
``palyra_gen/codec_runtime.py``; ``palyra_gen/proto_json.py`` and
``palyra_gen/proto_binary.py`` (rendered by ``codegen/render_codecs.py``) hold one
straight-line encoder and one decoding table per message and import the rest from
here. Nothing here is specific to a message. The rules are betterproto2's, to the
byte (``tests/core/test_protojson.py``, ``tests/core/test_protobin.py``).
"""

from __future__ import annotations

import base64
import enum
import math
import struct
from collections.abc import Callable, Mapping
from typing import Any

import betterproto2
from betterproto2.casing import safe_snake_case

# -- proto3 JSON: encoding ----------------------------------------------------------------


def enum_json(value: Any) -> Any:
    """An enum as its proto name (a number betterproto2 has no member for stays a number)."""
    name = getattr(value, "proto_name", None)
    return name if name else int(value)


def bytes_json(value: bytes) -> str:
    """Bytes as standard base64."""
    return base64.b64encode(value).decode("utf8")


def float_json(value: float) -> Any:
    """A float, with the three values JSON has no number for spelled as proto3 spells them."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


# -- proto3 JSON: decoding ----------------------------------------------------------------

Convert = Callable[[Any, bool], Any]
"""``(JSON value, ignore unknown fields) -> field value``."""
JsonTable = tuple[dict[str, str], dict[str, Convert | None]]
"""A message's decoding table: JSON key -> field name, and field name -> its converter
(None: the value is kept as it is)."""

_CACHE_LIMIT = 256  # bound on memoised enum names per enum (hostile input)
_ENUM_NAMES: dict[type[Any], dict[str, Any]] = {}


def decode_json(cls: type[Any], table: JsonTable, mapping: Mapping[str, Any],
                ignore_unknown_fields: bool) -> Any:
    """``cls.from_dict(mapping)`` by ``cls``'s table.

    Raises:
        KeyError: an unknown field and not ``ignore_unknown_fields``.
        ValueError: a bad enum value.
    """
    keys, converters = table
    kwargs: dict[str, Any] = {}
    for key, value in mapping.items():
        name = keys.get(key)
        if name is None:
            # Any other spelling betterproto2 would map to a field (rare: not memoised,
            # so hostile keys cost no memory).
            snake = safe_snake_case(key)
            if snake not in converters:
                if ignore_unknown_fields:
                    continue
                raise KeyError(f"Unknown field '{snake}' in message {cls.__name__}.")
            name = snake
        if value is None:
            continue
        convert = converters[name]
        kwargs[name] = value if convert is None else convert(value, ignore_unknown_fields)
    return cls(**kwargs)


def json_int(value: Any, ignore: bool) -> int:
    """Any integer type: a number or a decimal string."""
    return int(value)


def json_bytes(value: Any, ignore: bool) -> bytes:
    """Base64 to bytes."""
    return base64.b64decode(value)


def json_float(value: Any, ignore: bool) -> float:
    """A number or one of proto3's spelled-out floats."""
    parsed: float = getattr(betterproto2, "_parse_float")(value)  # noqa: B009 (untyped)
    return parsed


def json_enum(enum_cls: type[Any]) -> Convert:
    """An enum member from its name, its number or itself."""
    def convert(value: Any, ignore: bool) -> Any:
        if isinstance(value, str):
            return _enum_by_name(enum_cls, value)
        if isinstance(value, int):
            return enum_cls(value)
        if isinstance(value, enum.Enum):
            return value
        raise ValueError("Enum value must be a string or an Enum instance")
    return convert


def json_message(cls: type[Any], decode: Callable[[type[Any], Mapping[str, Any], bool], Any]
                 ) -> Convert:
    """A nested message, through ``decode`` (the generated module's dispatcher)."""
    def convert(value: Any, ignore: bool) -> Any:
        return decode(cls, value, ignore)
    return convert


def json_list(item: Convert | None) -> Convert:
    """A repeated field."""
    if item is None:
        return lambda value, ignore: list(value)
    return lambda value, ignore: [item(x, ignore) for x in value]


def json_map(key: Convert | None, value: Convert | None) -> Convert:
    """A map field."""
    def convert(mapping: Any, ignore: bool) -> dict[Any, Any]:
        return {(k if key is None else key(k, ignore)): (v if value is None else value(v, ignore))
                for k, v in mapping.items()}
    return convert


def _enum_by_name(enum_cls: type[Any], name: str) -> Any:
    names = _ENUM_NAMES.get(enum_cls)
    if names is None:
        names = _ENUM_NAMES[enum_cls] = {}
    member = names.get(name)
    if member is None:
        # betterproto2's rule: a renamed proto name first, then the member name.
        int_value = enum_cls.betterproto_renamed_proto_names_to_value().get(name)
        member = enum_cls(int_value) if int_value is not None else enum_cls.from_string(name)
        if len(names) < _CACHE_LIMIT:
            names[name] = member
    return member


# -- binary: encoding ---------------------------------------------------------------------

SMALL = tuple(bytes((i,)) for i in range(0x80))
"""``SMALL[n]`` is the varint of ``0 <= n < 128`` (one byte)."""


def varint(value: int) -> bytes:
    """The varint of ``value`` (a negative one as its 64-bit two's complement)."""
    if 0 <= value < 0x80:
        return SMALL[value]
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


def zigzag(value: int) -> bytes:
    """The varint of a ``sint32``/``sint64``."""
    return varint(value << 1 if value >= 0 else (value << 1) ^ ~0)


# The little-endian packers of the fixed-width types, named ``pack_<proto type>``.
pack_float = struct.Struct("<f").pack
pack_double = struct.Struct("<d").pack
pack_fixed32 = struct.Struct("<I").pack
pack_sfixed32 = struct.Struct("<i").pack
pack_fixed64 = struct.Struct("<Q").pack
pack_sfixed64 = struct.Struct("<q").pack


# -- binary: decoding ---------------------------------------------------------------------

class Fallback(Exception):
    """The fast decoder met something it leaves to betterproto2 (bad input, odd wire types)."""


Reader = Callable[[bytes, int, int], tuple[Any, int]]
"""Reads one field's value at ``pos`` (just after its key), ``end`` the message's end:
the value and the new position."""
BinaryTable = tuple[dict[int, tuple[str, int, Reader]], frozenset[int]]
"""A message's decoding table: field key (number and wire type) -> (field name,
repeated, reader), and the message's field numbers."""


class Packed(list[Any]):
    """Values of one packed run (extend the field, do not append)."""


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
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
            raise Fallback("varint too long")


def varint_convert(proto_type: str, enum_cls: Any = None) -> Callable[[int], Any] | None:
    """betterproto2's ``_postprocess_single`` for a varint of ``proto_type`` (None: as is)."""
    if proto_type in ("int32", "int64", "enum"):
        bits = 32 if proto_type == "int32" else 64
        mask, sign = (1 << bits) - 1, 1 << (bits - 1)
        if proto_type == "enum":
            return lambda v: enum_cls(((v & mask) ^ sign) - sign)
        return lambda v: ((v & mask) ^ sign) - sign if v > 0x7FFFFFFF else v
    if proto_type in ("uint32", "uint64"):
        mask = (1 << (32 if proto_type == "uint32" else 64)) - 1
        return lambda v: v & mask
    if proto_type in ("sint32", "sint64"):
        mask = (1 << (32 if proto_type == "sint32" else 64)) - 1
        return lambda v: ((v & mask) >> 1) ^ (-((v & mask) & 1))
    return lambda v: v > 0  # bool


def varint_readers(convert: Callable[[int], Any] | None,
                   repeated: bool) -> list[tuple[int, Reader]]:
    """A varint field's readers by wire type (a repeated one also reads a packed run)."""
    def read(data: bytes, pos: int, end: int) -> tuple[Any, int]:
        value = data[pos]  # one byte, most values: no call
        if value < 0x80:
            pos += 1
        else:
            value, pos = read_varint(data, pos)
        return (convert(value) if convert is not None else value), pos

    if not repeated:
        return [(0, read)]

    def read_packed(data: bytes, pos: int, end: int) -> tuple[Any, int]:
        n, pos = read_varint(data, pos)
        stop = pos + n
        if stop > end:
            raise Fallback("truncated")
        values = Packed()
        while pos < stop:
            value, pos = read_varint(data, pos)
            values.append(convert(value) if convert is not None else value)
        if pos != stop:
            raise Fallback("packed overrun")
        return values, pos

    return [(0, read), (2, read_packed)]


def fixed_readers(proto_type: str, repeated: bool) -> list[tuple[int, Reader]]:
    """A fixed-width field's readers by wire type (a repeated one also reads a packed run)."""
    size = 8 if proto_type in ("double", "fixed64", "sfixed64") else 4
    fmt = {"float": "<f", "double": "<d", "fixed32": "<I", "sfixed32": "<i",
           "fixed64": "<Q", "sfixed64": "<q"}[proto_type]
    unpack = struct.Struct(fmt).unpack_from

    def read(data: bytes, pos: int, end: int) -> tuple[Any, int]:
        if pos + size > end:
            raise Fallback("truncated")
        return unpack(data, pos)[0], pos + size

    readers: list[tuple[int, Reader]] = [(1 if size == 8 else 5, read)]
    if repeated:
        def read_packed(data: bytes, pos: int, end: int) -> tuple[Any, int]:
            n, pos = read_varint(data, pos)
            stop = pos + n
            if stop > end or n % size:
                raise Fallback("truncated")
            return Packed(unpack(data, p)[0] for p in range(pos, stop, size)), stop
        readers.append((2, read_packed))
    return readers


def delimited_reader(make: Callable[[bytes], Any]) -> list[tuple[int, Reader]]:
    """A length-delimited field's reader (strings, bytes, messages).

    Every tape event is mostly such fields, so the common cases cost no call beyond the
    reader itself: a length under 128 is read inline, and a string is decoded in place
    (as :func:`utf8` would).
    """
    as_str = make is utf8

    def read(data: bytes, pos: int, end: int) -> tuple[Any, int]:
        n = data[pos]
        if n < 0x80:
            pos += 1
        else:
            n, pos = read_varint(data, pos)
        stop = pos + n
        if stop > end:
            raise Fallback("truncated")
        if as_str:
            return data[pos:stop].decode("utf-8"), stop
        return make(data[pos:stop]), stop
    return [(2, read)]


def message_reader(cls: type[Any], decode: Callable[[type[Any], bytes], Any]
                   ) -> list[tuple[int, Reader]]:
    """A nested message's reader, through ``decode`` (the generated module's dispatcher)."""
    return delimited_reader(lambda chunk: decode(cls, chunk))


MAP = 2
"""A table entry's ``repeated`` for a map field: each value read is one entry, set by its key."""


def map_reader(cls: type[Any], name: str, key: list[tuple[int, Reader]],
               value: list[tuple[int, Reader]]) -> list[tuple[int, Reader]]:
    """A map field's reader: each entry decoded as betterproto2's own entry class for the
    field (so a missing key or value takes that class's default, as ``parse`` gives it)."""
    table = binary_table(((1, "key", False, key), (2, "value", False, value)))
    entry: list[type[Any]] = []  # looked up at the first entry: no metadata built at import

    def read_entry(chunk: bytes) -> Any:
        if not entry:
            entry.append(cls._betterproto.cls_by_field[name])
        return decode_table(entry[0], table, chunk)

    return delimited_reader(read_entry)


def binary_table(fields: tuple[tuple[int, str, int, list[tuple[int, Reader]]], ...],
                 ) -> BinaryTable:
    """A message's table from its fields' ``(number, name, repeated, readers)``
    (``repeated``: false, true, or :data:`MAP`)."""
    readers = {(number << 3) | wire: (name, repeated, read)
               for number, name, repeated, by_wire in fields for wire, read in by_wire}
    return readers, frozenset(number for number, *_ in fields)


def utf8(chunk: bytes) -> str:
    """A string field's value."""
    return chunk.decode("utf-8")


def same(chunk: bytes) -> bytes:
    """A bytes field's value."""
    return chunk


def skip(data: bytes, pos: int, wire: int, end: int) -> int:
    """The position after an unknown field's value."""
    if wire == 0:
        return read_varint(data, pos)[1]
    if wire == 1:
        pos += 8
    elif wire == 2:
        n, pos = read_varint(data, pos)
        pos += n
    elif wire == 5:
        pos += 4
    else:
        raise Fallback("group or bad wire type")
    if pos > end:
        raise Fallback("truncated")
    return pos


def decode_table(cls: type[Any], table: BinaryTable, data: bytes) -> Any:
    """``cls.parse(data)`` by ``cls``'s table; raises :class:`Fallback` (or the
    ``IndexError``/``UnicodeDecodeError``/``ValueError`` of bad input) where
    betterproto2 must decide."""
    readers, numbers = table
    message = cls()
    pos, end = 0, len(data)
    unknown = b""
    while pos < end:
        start = pos
        key = data[pos]  # one byte for fields 1-15: no call
        if key < 0x80:
            pos += 1
        else:
            key, pos = read_varint(data, pos)
        entry = readers.get(key)
        if entry is None:
            if (key >> 3) in numbers or key >> 3 == 0:
                raise Fallback("known field, unexpected wire type")
            pos = skip(data, pos, key & 7, end)
            unknown += data[start:pos]
            continue
        name, repeated, read = entry
        value, pos = read(data, pos, end)
        if repeated:
            if repeated == MAP:
                getattr(message, name)[value.key] = value.value
            elif type(value) is Packed:
                getattr(message, name).extend(value)
            else:
                getattr(message, name).append(value)
        else:
            setattr(message, name, value)
    if unknown:
        message._unknown_fields = unknown
    return message
