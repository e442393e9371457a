"""Fast proto3 JSON and binary codecs, one straight-line function per message, as source.

betterproto2's generic paths are slow where palyra is hot: ``to_dict`` re-reads the
class's type hints and ``bytes()`` looks every field's default up under
``warnings.catch_warnings`` on every call, ``from_dict`` re-derives each key's name with
regular expressions and ``parse`` reads through a ``BytesIO``. For every message whose
fields allow it, this renders an encoder that reads each attribute directly and writes
exactly what betterproto2 would (defaults skipped, int64 as strings, packed scalars,
map entries, unknown fields kept), and a decoding table (JSON key or binary field key
-> field and converter) that the loops of ``codec_runtime`` walk. A message they do not
cover (a wrapped type, a hand-written ``from_dict``) stays with betterproto2.

Pure: plans in (``codec_plans``), source text out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from codegen.codec_runtime import varint

GENERATOR = "codegen/render_codecs.py"
RUNTIME_GENERATOR = "codegen/codec_runtime.py"

_VARINT = frozenset({"enum", "bool", "int32", "int64", "uint32", "uint64"})
_ZIGZAG = frozenset({"sint32", "sint64"})
_FIXED = frozenset({"float", "double", "fixed32", "sfixed32", "fixed64", "sfixed64"})
_FIXED64 = frozenset({"double", "fixed64", "sfixed64"})
_PACKED = _VARINT | _ZIGZAG | _FIXED
_INT64 = frozenset({"int64", "sint64", "sfixed64", "uint64", "fixed64"})
_ALL_INTS = frozenset({"int32", "int64", "uint32", "uint64", "sint32", "sint64",
                       "fixed32", "fixed64", "sfixed32", "sfixed64"})

Plan = dict[str, Any]


class _Names:
    """Module aliases and per-class function names, stable for one set of plans."""

    def __init__(self, plans: Sequence[Plan]) -> None:
        modules = sorted({p["cls"][0] for p in plans})
        self.alias = {m: f"_m{i}" for i, m in enumerate(modules)}
        self.short: dict[tuple[str, str], str] = {}
        taken: set[str] = set()
        for plan in plans:
            module, qualname = plan["cls"]
            name = qualname.replace(".", "_")
            if name in taken:
                name = f"{self.alias[module].lstrip('_')}_{name}"
            taken.add(name)
            self.short[(module, qualname)] = name

    def cls(self, ref: Sequence[str]) -> str:
        return f"{self.alias[ref[0]]}.{ref[1]}"

    def imports(self) -> list[str]:
        return [f"import {m} as {a}" for m, a in self.alias.items()]


def _encodable(plan: Plan) -> bool:
    """Encoders cover a class with no wrapped field and plain identifiers for names."""
    return plan["identifiers"] and not any(
        f["unwrap"] or (f["map"] and f["map"]["value_unwrap"]) for f in plan["fields"])


def _json_decodable(plan: Plan) -> bool:
    """JSON decoding also leaves custom parsers and ``google.protobuf.Value`` fields
    (where a JSON null is a value, not an absent field) to betterproto2."""
    return _encodable(plan) and not plan["custom_json"] and not any(
        f["cls"] == ["palyra_gen.google.protobuf", "Value"] for f in plan["fields"])


def _binary_decodable(plan: Plan) -> bool:
    """Binary decoding covers what the encoders cover, map fields included."""
    return _encodable(plan)


def _covered(plans: Sequence[Plan]) -> set[tuple[str, str]]:
    return {(p["cls"][0], p["cls"][1]) for p in plans if _encodable(p)}


# -- JSON ---------------------------------------------------------------------------------


def render_json(plans: Sequence[Plan]) -> str:
    """The source of ``palyra_gen/proto_json.py``."""
    names = _Names(plans)
    covered = _covered(plans)
    out = ['"""proto3 JSON of every palyra message, as betterproto2\'s ``to_dict``/``from_dict``',
           "give it, one straight-line encoder and one decoding table per message.", '"""',
           "", "from __future__ import annotations", "",
           "from collections.abc import Callable, Mapping",
           "from typing import Any, TypeVar", "",
           "import betterproto2", "",
           *names.imports(),
           "from palyra_gen.codec_runtime import (",
           "    JsonTable, bytes_json, decode_json, enum_json, float_json, json_bytes,",
           "    json_enum, json_float, json_int, json_list, json_map, json_message,", ")",
           "", 'M = TypeVar("M", bound=betterproto2.Message)', "", "",
           "def encode_message(message: betterproto2.Message) -> dict[str, Any]:",
           '    """``message.to_dict()``."""',
           "    encode = JSON_ENCODERS.get(type(message))",
           "    return encode(message) if encode is not None else message.to_dict()", "", "",
           "def decode_message(cls: type[M], mapping: Mapping[str, Any],",
           "                   ignore_unknown_fields: bool = False) -> M:",
           '    """``cls.from_dict(mapping, ignore_unknown_fields=...)``."""',
           "    table = JSON_TABLES.get(cls)",
           "    if table is None:",
           "        return cls.from_dict(mapping, ignore_unknown_fields=ignore_unknown_fields)",
           "    decoded: M = decode_json(cls, table, mapping, ignore_unknown_fields)",
           "    return decoded", ""]
    encoders, tables = [], []
    for plan in plans:
        short = names.short[(plan["cls"][0], plan["cls"][1])]
        if _encodable(plan):
            out += ["", *_json_encoder(plan, short, names, covered)]
            encoders.append(f"    {names.cls(plan['cls'])}: _json_{short},")
        if _json_decodable(plan):
            out += ["", *_json_table(plan, short, names)]
            tables.append(f"    {names.cls(plan['cls'])}: _json_table_{short},")
    out += ["", "JSON_ENCODERS: dict[type[Any], Callable[[Any], dict[str, Any]]] = {",
            *encoders, "}",
            "JSON_TABLES: dict[type[Any], JsonTable] = {", *tables, "}", ""]
    return "\n".join(out)


def _json_value(proto_type: str, ref: Sequence[str] | None, x: str, names: _Names,
                covered: set[tuple[str, str]]) -> str:
    """The JSON form of one value ``x`` of ``proto_type``."""
    if proto_type == "message":
        assert ref is not None
        if (ref[0], ref[1]) in covered:
            short = names.short[(ref[0], ref[1])]
            return f"_json_{short}({x}) if type({x}) is {names.cls(ref)} else encode_message({x})"
        return f"encode_message({x})"
    if proto_type in _INT64:
        return f"str({x})"
    if proto_type == "enum":
        return f"enum_json({x})"
    if proto_type == "bytes":
        return f"bytes_json({x})"
    if proto_type in ("float", "double"):
        return f"float_json({x})"
    return x


def _json_encoder(plan: Plan, short: str, names: _Names,
                  covered: set[tuple[str, str]]) -> list[str]:
    lines = [f"def _json_{short}(m: Any) -> dict[str, Any]:", "    out: dict[str, Any] = {}"]
    for i, f in enumerate(plan["fields"]):
        v, key = f"v{i}", f["json_key"]
        lines.append(f"    {v} = m.{f['name']}")
        if f["repeated"]:
            item = _json_value(f["proto_type"], f["cls"], "x", names, covered)
            value = f"list({v})" if item == "x" else f"[{item} for x in {v}]"
            lines += [f"    if {v}:", f"        out[{key!r}] = {value}"]
        elif f["map"]:
            meta = f["map"]
            k = _json_value(meta["key_type"], None, "k", names, covered)
            x = _json_value(meta["value_type"], meta["value_cls"], "x", names, covered)
            lines += [f"    if {v}:", f"        out[{key!r}] = {{{k}: {x} for k, x in {v}.items()}}"]
        else:
            # Kept when set (explicit presence, messages) or when truthy: to_dict drops
            # a scalar equal to its default, and a float's -0.0 like its 0.0.
            kept = f"{v} is not None" if f["optional"] or f["proto_type"] == "message" else v
            value = _json_value(f["proto_type"], f["cls"], v, names, covered)
            lines += [f"    if {kept}:", f"        out[{key!r}] = {value}"]
    return [*lines, "    return out", ""]


def _json_converter(proto_type: str, ref: Sequence[str] | None, names: _Names) -> str:
    if proto_type == "message":
        assert ref is not None
        return f"json_message({names.cls(ref)}, decode_message)"
    if proto_type == "enum":
        assert ref is not None
        return f"json_enum({names.cls(ref)})"
    if proto_type in _ALL_INTS:
        return "json_int"
    if proto_type == "bytes":
        return "json_bytes"
    if proto_type in ("float", "double"):
        return "json_float"
    return "None"


def _json_table(plan: Plan, short: str, names: _Names) -> list[str]:
    keys = {k: f["name"] for f in plan["fields"] for k in f["keys"]}
    lines = [f"_json_table_{short}: JsonTable = (", "    {"]
    lines += [f"        {k!r}: {n!r}," for k, n in sorted(keys.items())]
    lines += ["    },", "    {"]
    for f in plan["fields"]:
        if f["map"]:
            meta = f["map"]
            conv = (f"json_map({_json_converter(meta['key_type'], None, names)}, "
                    f"{_json_converter(meta['value_type'], meta['value_cls'], names)})")
        else:
            conv = _json_converter(f["proto_type"], f["cls"], names)
            if f["repeated"]:
                conv = f"json_list({conv})"
        lines.append(f"        {f['name']!r}: {conv},")
    return [*lines, "    },", ")", ""]


# -- binary -------------------------------------------------------------------------------


def render_binary(plans: Sequence[Plan]) -> str:
    """The source of ``palyra_gen/proto_binary.py``."""
    names = _Names(plans)
    covered = _covered(plans)
    out = ['"""The protobuf binary form of every palyra message, as betterproto2\'s',
           "``bytes()``/``parse`` give it, one straight-line encoder and one decoding table",
           'per message."""', "",
           "from __future__ import annotations", "",
           "from collections.abc import Callable",
           "from typing import Any, TypeVar", "",
           "import betterproto2", "",
           *names.imports(),
           "from palyra_gen.codec_runtime import (",
           "    MAP, SMALL, BinaryTable, Fallback, binary_table, decode_table, delimited_reader,",
           "    fixed_readers, map_reader, message_reader, pack_double, pack_fixed32, pack_fixed64,",
           "    pack_float, pack_sfixed32, pack_sfixed64, same, utf8, varint, varint_convert,",
           "    varint_readers, zigzag,", ")",
           "", 'M = TypeVar("M", bound=betterproto2.Message)', "", "",
           "def encode_binary(message: betterproto2.Message) -> bytes:",
           '    """``bytes(message)``."""',
           "    body = BODIES.get(type(message))",
           "    return bytes(body(message)) if body is not None else bytes(message)", "", "",
           "def body_encoder(cls: type[Any]) -> Callable[[Any], bytes | bytearray]:",
           '    """``cls``\'s encoder, returning its ``bytearray`` as built (no copy)."""',
           "    return BODIES.get(cls) or bytes", "", "",
           "def decode_binary(cls: type[M], data: bytes) -> M:",
           '    """``cls.parse(data)``; anything unusual is left to betterproto2 itself, so',
           '    errors are betterproto2\'s."""',
           "    table = BINARY_TABLES.get(cls)",
           "    if table is not None:",
           "        try:",
           "            decoded: M = decode_table(cls, table, bytes(data))",
           "            return decoded",
           "        except (Fallback, IndexError, UnicodeDecodeError, ValueError):",
           "            pass",
           "    return cls.parse(data)", ""]
    bodies, tables = [], []
    for plan in plans:
        short = names.short[(plan["cls"][0], plan["cls"][1])]
        if _encodable(plan):
            out += ["", *_binary_encoder(plan, short, names, covered)]
            bodies.append(f"    {names.cls(plan['cls'])}: _bin_{short},")
        if _binary_decodable(plan):
            out += ["", *_binary_table(plan, short, names)]
            tables.append(f"    {names.cls(plan['cls'])}: _bin_table_{short},")
    out += ["", "BODIES: dict[type[Any], Callable[[Any], bytearray]] = {", *bodies, "}",
            "BINARY_TABLES: dict[type[Any], BinaryTable] = {", *tables, "}", ""]
    return "\n".join(out)


def _wire_type(proto_type: str) -> int:
    if proto_type in _VARINT or proto_type in _ZIGZAG:
        return 0
    if proto_type in _FIXED:
        return 1 if proto_type in _FIXED64 else 5
    return 2


def _tag(number: int, wire: int) -> str:
    return repr(varint((number << 3) | wire))


def _payload(proto_type: str, ref: Sequence[str] | None, x: str, names: _Names,
             covered: set[tuple[str, str]]) -> str:
    """The bytes of one value ``x`` (no tag, no length prefix)."""
    if proto_type in _VARINT:
        return f"varint(int({x}))"
    if proto_type in _ZIGZAG:
        return f"zigzag({x})"
    if proto_type in _FIXED:
        return f"pack_{proto_type}({x})"
    if proto_type == "string":
        return f"{x}.encode()"
    if proto_type == "bytes":
        return f"bytes({x})"
    assert ref is not None
    if (ref[0], ref[1]) in covered:
        # The declared class's body directly: no bytes() copy per level.
        short = names.short[(ref[0], ref[1])]
        return f"_bin_{short}({x}) if type({x}) is {names.cls(ref)} else encode_binary({x})"
    return f"encode_binary({x})"


def _write_one(buf: str, tag: str, proto_type: str, ref: Sequence[str] | None, x: str,
               suffix: str, names: _Names, covered: set[tuple[str, str]]) -> list[str]:
    """Lines appending ``tag`` and one value ``x`` (length-prefixed for wire type 2)."""
    if proto_type in _VARINT:
        n = f"n{suffix}"
        return [f"{buf} += {tag}", f"{n} = int({x})",
                f"{buf} += SMALL[{n}] if 0 <= {n} < 128 else varint({n})"]
    payload = _payload(proto_type, ref, x, names, covered)
    if _wire_type(proto_type) != 2:
        return [f"{buf} += {tag}", f"{buf} += {payload}"]
    b, n = f"b{suffix}", f"n{suffix}"
    return [f"{b} = {payload}", f"{n} = len({b})", f"{buf} += {tag}",
            f"{buf} += SMALL[{n}] if {n} < 128 else varint({n})", f"{buf} += {b}"]


def _present(f: Plan, v: str) -> str:
    """The test that the field differs from its default (betterproto2 skips it then)."""
    if f["repeated"] or f["map"]:
        return v  # an empty list or map is the default
    default, proto_type = f["default"], f["proto_type"]
    if default is None:
        return f"{v} is not None"
    if ((proto_type == "string" and default == "") or (proto_type in _VARINT and default == 0)
            or (proto_type == "bytes" and default == {"bytes": ""})):
        return v  # falsy is exactly "None or the default" for these types
    return f"{v} is not None and {v} != {default!r}"


def _binary_field(i: int, f: Plan, names: _Names, covered: set[tuple[str, str]]) -> list[str]:
    v, pt, number = f"v{i}", f["proto_type"], f["number"]
    lines = [f"    {v} = m.{f['name']}", f"    if {_present(f, v)}:"]
    body: list[str]
    if f["map"]:
        meta = f["map"]
        entry = f"e{i}"
        body = [f"for k{i}, x{i} in {v}.items():", f"    {entry} = bytearray()"]
        body += ["    " + s for s in _write_one(entry, _tag(1, _wire_type(meta["key_type"])),
                                               meta["key_type"], None, f"k{i}", f"{i}k",
                                               names, covered)]
        body += ["    " + s for s in _write_one(entry, _tag(2, _wire_type(meta["value_type"])),
                                               meta["value_type"], meta["value_cls"], f"x{i}",
                                               f"{i}v", names, covered)]
        body += [f"    out += {_tag(number, 2)}", f"    n{i} = len({entry})",
                 f"    out += SMALL[n{i}] if n{i} < 128 else varint(n{i})", f"    out += {entry}"]
    elif f["repeated"] and pt in _PACKED:
        payload = _payload(pt, f["cls"], "x", names, covered)
        body = [f'p{i} = b"".join({payload} for x in {v})', f"n{i} = len(p{i})",
                f"out += {_tag(number, 2)}", f"out += SMALL[n{i}] if n{i} < 128 else varint(n{i})",
                f"out += p{i}"]
    elif f["repeated"]:
        body = [f"for x{i} in {v}:"]
        body += ["    " + s for s in _write_one("out", _tag(number, _wire_type(pt)), pt, f["cls"],
                                               f"x{i}", str(i), names, covered)]
    else:
        body = _write_one("out", _tag(number, _wire_type(pt)), pt, f["cls"], v, str(i),
                          names, covered)
    return lines + ["        " + s for s in body]


def _binary_encoder(plan: Plan, short: str, names: _Names,
                    covered: set[tuple[str, str]]) -> list[str]:
    lines = [f"def _bin_{short}(m: Any) -> bytearray:", "    out = bytearray()"]
    for i, f in enumerate(plan["fields"]):
        lines += _binary_field(i, f, names, covered)
    return [*lines, "    unknown = m._unknown_fields", "    if unknown:",
            "        out += unknown", "    return out", ""]


def _readers(f: Plan, names: _Names, owner: str) -> str:
    if f["map"]:
        meta = f["map"]
        key = _scalar_readers(meta["key_type"], None, False, names)
        value = _scalar_readers(meta["value_type"], meta["value_cls"], False, names)
        return f"map_reader({owner}, {f['name']!r}, {key}, {value})"
    return _scalar_readers(f["proto_type"], f["cls"], f["repeated"], names)


def _scalar_readers(pt: str, ref: Sequence[str] | None, repeated: bool, names: _Names) -> str:
    if pt == "enum":
        return f"varint_readers(varint_convert('enum', {names.cls(ref or ())}), {repeated})"
    if pt in _VARINT or pt in _ZIGZAG:
        return f"varint_readers(varint_convert({pt!r}), {repeated})"
    if pt in _FIXED:
        return f"fixed_readers({pt!r}, {repeated})"
    if pt == "string":
        return "delimited_reader(utf8)"
    if pt == "bytes":
        return "delimited_reader(same)"
    return f"message_reader({names.cls(ref or ())}, decode_binary)"


def _binary_table(plan: Plan, short: str, names: _Names) -> list[str]:
    lines = [f"_bin_table_{short}: BinaryTable = binary_table(("]
    for f in plan["fields"]:
        repeated = "MAP" if f["map"] else f["repeated"]
        readers = _readers(f, names, names.cls(plan["cls"]))
        lines.append(f"    ({f['number']}, {f['name']!r}, {repeated}, {readers}),")
    return [*lines, "))", ""]
