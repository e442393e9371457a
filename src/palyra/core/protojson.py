"""Fast proto3-JSON encoding and decoding of betterproto2 messages (``to_dict()``/``from_dict()``).

``Message.to_dict`` re-evaluates the class's string type hints on every call
(``typing.get_type_hints``), which made it ~70 % of the daemon's CPU per
streamed SSE event. This encoder walks the same generated field metadata,
cached per class, and produces the identical dict (checked by
tests/core/test_protojson.py): lowerCamelCase keys, defaults omitted
(except explicit-presence fields), int64 as strings, bytes as base64, enums
by proto name.

``decode_message`` is the mirror image for ``Message.from_dict``, which
re-derives every key's snake_case name with regular expressions on every
call: it follows the same rules over per-class cached plans and builds an
equal message (checked by tests/core/test_protojson.py).
"""

from __future__ import annotations

import base64
import enum
import functools
import keyword
import math
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import betterproto2
from betterproto2.casing import safe_snake_case

_INT64 = frozenset({"int64", "sint64", "sfixed64", "uint64", "fixed64"})
_FLOATS = frozenset({"float", "double"})


def _camel(name: str) -> str:
    head, *rest = name.rstrip("_").split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


# How a field is emitted: repeated, map, or a single value that is kept when
# set, or when truthy (to_dict drops a float's -0.0 like its 0.0).
_REPEATED, _MAP, _ALWAYS, _TRUTHY = range(4)


def _converter(proto_type: str) -> Any:
    """``value -> JSON value`` for one proto type; ``None`` when the value is kept as is."""
    if proto_type == "message":
        return encode_message
    if proto_type in _INT64:
        return str
    if proto_type == "enum":
        return _enum_json
    if proto_type == "bytes":
        return _bytes_json
    if proto_type in _FLOATS:
        return _float_json
    return None  # string, bool and 32-bit integers


def _enum_json(value: Any) -> Any:
    name = getattr(value, "proto_name", None)
    return name if name else int(value)


def _bytes_json(value: bytes) -> str:
    return base64.b64encode(value).decode("utf8")


def _float_json(value: float) -> Any:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


@functools.cache
def _plan(cls: type[Any]) -> tuple[tuple[str, str, int, Any, Any], ...] | None:
    """``(field, json key, kind, converter, map value converter)`` per field;
    ``None`` if a wrapped type needs the slow path."""
    meta = typing.cast(Any, cls)._betterproto
    plan = []
    for name, fm in meta.meta_by_field_name.items():
        if fm.unwrap is not None or (fm.map_meta and fm.map_meta[1].unwrap is not None):
            return None
        proto_type = fm.proto_type
        if fm.repeated:
            entry = (_REPEATED, _converter(proto_type), None)
        elif proto_type == "map":
            entry = (_MAP, _converter(fm.map_meta[0].proto_type),
                     _converter(fm.map_meta[1].proto_type))
        elif fm.optional or proto_type == "message":
            entry = (_ALWAYS, _converter(proto_type), None)
        else:
            entry = (_TRUTHY, _converter(proto_type), None)
        plan.append((name, _camel(name), *entry))
    return tuple(plan)


def encode_message(message: betterproto2.Message) -> dict[str, Any]:
    """``message.to_dict()``, fast."""
    return _encoder(type(message))(message)


@functools.cache
def _encoder(cls: type[betterproto2.Message]) -> Callable[[betterproto2.Message], dict[str, Any]]:
    """A function compiled for ``cls`` from its plan: one straight-line body per
    class instead of a loop that dispatches on every field's kind at every call
    (the engine encodes every tape member it journals, so this is on every step).
    Same rules as :func:`_encode_by_plan`, which is the fallback and the reference."""
    plan = _plan(cls)
    if plan is None:
        return lambda message: message.to_dict()
    if not all(name.isidentifier() and not keyword.iskeyword(name) for name, *_ in plan):
        return functools.partial(_encode_by_plan, plan)
    namespace: dict[str, Any] = {}
    lines = ["def encode(m):", "    out = {}"]
    for i, (name, key, kind, conv, value_conv) in enumerate(plan):
        c, vc = f"_c{i}", f"_v{i}"
        namespace[c], namespace[vc] = conv, value_conv
        lines.append(f"    v = m.{name}")
        if kind == _REPEATED:
            value = f"[{c}(x) for x in v]" if conv else "list(v)"
            lines += ["    if v:", f"        out[{key!r}] = {value}"]
            continue
        if kind == _MAP:
            k = f"{c}(k)" if conv else "k"
            val = f"{vc}(x)" if value_conv else "x"
            lines += ["    if v:", f"        out[{key!r}] = {{{k}: {val} for k, x in v.items()}}"]
            continue
        test = "v is not None" if kind == _ALWAYS else "v is not None and v"
        lines += [f"    if {test}:", f"        out[{key!r}] = {f'{c}(v)' if conv else 'v'}"]
    lines.append("    return out")
    exec("\n".join(lines), namespace)  # the source is built above from field metadata only
    encode: Callable[[betterproto2.Message], dict[str, Any]] = namespace["encode"]
    return encode


def _encode_by_plan(plan: tuple[tuple[str, str, int, Any, Any], ...],
                    message: betterproto2.Message) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, key, kind, conv, value_conv in plan:
        value = getattr(message, name)
        if kind == _REPEATED:
            if value:
                out[key] = [conv(v) for v in value] if conv else list(value)
        elif kind == _MAP:
            if value:
                out[key] = {(conv(k) if conv else k): (value_conv(v) if value_conv else v)
                            for k, v in value.items()}
        elif value is None:
            continue
        elif kind == _ALWAYS or value:
            out[key] = conv(value) if conv else value
    return out


# -- decoding ----------------------------------------------------------------

M = TypeVar("M", bound=betterproto2.Message)
_ALL_INTS = frozenset(betterproto2.ALL_INT_TYPES)
_CACHE_LIMIT = 256  # bound on memoised keys / enum names per class (hostile input)
_BASE_FROM_DICT = betterproto2.Message.__dict__["from_dict"].__func__
_BASE_FROM_DICT_INIT = betterproto2.Message.__dict__["_from_dict_init"].__func__


class _DecodePlan:
    """Per-class decoding tables: key → field, memoised as keys are seen."""

    __slots__ = ("fields", "keys")

    def __init__(self, fields: dict[str, tuple[Any, type[Any], type[Any] | None]]) -> None:
        # field name -> (metadata, field class, map value class)
        self.fields = fields
        # JSON key -> field name, or "" for an unknown key
        self.keys: dict[str, str] = {}

    def field_of(self, key: str) -> str:
        name = self.keys.get(key)
        if name is None:
            snake = safe_snake_case(key)
            name = snake if snake in self.fields else ""
            if len(self.keys) < _CACHE_LIMIT:
                self.keys[key] = name
        return name


def _overrides(cls: type[Any], attr: str, base: Any) -> bool:
    impl = getattr(cls, attr, None)
    return getattr(impl, "__func__", None) is not base


@functools.cache
def _decode_plan(cls: type[Any]) -> _DecodePlan | None:
    """``None`` when the class needs betterproto2's own ``from_dict`` (wrappers, custom parsing)."""
    if (hasattr(cls, "from_wrapped") or _overrides(cls, "from_dict", _BASE_FROM_DICT)
            or _overrides(cls, "_from_dict_init", _BASE_FROM_DICT_INIT)):
        return None
    meta = typing.cast(Any, cls)._betterproto
    fields: dict[str, tuple[Any, type[Any], type[Any] | None]] = {}
    for name, fm in meta.meta_by_field_name.items():
        if fm.unwrap is not None or (fm.map_meta and fm.map_meta[1].unwrap is not None):
            return None
        field_cls = meta.cls_by_field[name]
        if field_cls.__module__.endswith("google.protobuf") and field_cls.__name__ == "Value":
            return None  # a JSON null is a value there, not an absent field
        fields[name] = (fm, field_cls, meta.cls_by_field.get(f"{name}.value"))
    return _DecodePlan(fields)


def decode_message(cls: type[M], mapping: Mapping[str, Any], *,
                   ignore_unknown_fields: bool = False) -> M:
    """``cls.from_dict(mapping, ignore_unknown_fields=...)``, fast.

    Raises:
        KeyError: an unknown field and not ``ignore_unknown_fields``.
        ValueError: a bad enum value.
    """
    plan = _decode_plan(cls)
    if plan is None:
        return cls.from_dict(mapping, ignore_unknown_fields=ignore_unknown_fields)
    kwargs: dict[str, Any] = {}
    fields = plan.fields
    for key, value in mapping.items():
        name = plan.field_of(key)
        if not name:
            if ignore_unknown_fields:
                continue
            raise KeyError(f"Unknown field '{safe_snake_case(key)}' in message {cls.__name__}.")
        if value is None:
            continue
        fm, field_cls, value_cls = fields[name]
        if fm.proto_type == "map":
            key_meta, value_meta = fm.map_meta
            value = {_decode_value(k, key_meta, type(None), ignore_unknown_fields):
                     _decode_value(v, value_meta, typing.cast(type[Any], value_cls),
                                   ignore_unknown_fields)
                     for k, v in value.items()}
        elif fm.repeated:
            value = [_decode_value(item, fm, field_cls, ignore_unknown_fields) for item in value]
        else:
            value = _decode_value(value, fm, field_cls, ignore_unknown_fields)
        kwargs[name] = value
    return cls(**kwargs)


def _decode_value(value: Any, fm: Any, field_cls: type[Any], ignore_unknown_fields: bool) -> Any:
    proto_type = fm.proto_type
    if proto_type == "message":
        return decode_message(field_cls, value, ignore_unknown_fields=ignore_unknown_fields)
    if proto_type == "enum":
        if isinstance(value, str):
            return _enum_by_name(field_cls, value)
        if isinstance(value, int):
            return field_cls(value)
        if isinstance(value, enum.Enum):
            return value
        raise ValueError("Enum value must be a string or an Enum instance")
    if proto_type in _ALL_INTS:
        return int(value)
    if proto_type == "bytes":
        return base64.b64decode(value)
    if proto_type in _FLOATS:
        return typing.cast(Any, betterproto2)._parse_float(value)
    return value


_ENUM_NAMES: dict[type[Any], dict[str, Any]] = {}


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
