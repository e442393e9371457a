"""Strict proto3-JSON checking for HTTP request bodies and query strings.

betterproto2's ``Message.from_dict`` is lenient: it ignores wrong types (a
number where a string belongs). The gateway must refuse such bodies *before*
the application sees them, so every field is checked here against the
generated field metadata, recursively, and normalised to what ``from_dict``
accepts. Accepted spellings follow proto3 JSON: lowerCamelCase or the proto
field name; 64-bit integers as numbers or decimal strings; enums by full name
(``APPROVAL_STATE_PENDING``), by short name (``pending``) or by number.
"""

from __future__ import annotations

import base64
import binascii
import enum
import functools
import math
import re
import typing
from collections.abc import Mapping
from typing import Any

import betterproto2

from palyra.core.errors import ErrorCode, PalyraError

_DECIMAL = re.compile(r"-?[0-9]+")
_INT_RANGES = {
    "int32": (-(2**31), 2**31 - 1),
    "sint32": (-(2**31), 2**31 - 1),
    "sfixed32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "fixed32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "sint64": (-(2**63), 2**63 - 1),
    "sfixed64": (-(2**63), 2**63 - 1),
    "uint64": (0, 2**64 - 1),
    "fixed64": (0, 2**64 - 1),
}
_FLOAT_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def bad_request(path: str, problem: str) -> PalyraError:
    """A ``MALFORMED_REQUEST`` naming the offending JSON path."""
    where = path or "body"
    return PalyraError(f"{where}: {problem}", code=ErrorCode.MALFORMED_REQUEST,
                       details={"field": where})


def proto_meta(cls: type[Any]) -> Any:
    """The generated per-message metadata (fields, nested classes, oneof groups)."""
    return typing.cast(Any, cls)._betterproto


def camel(name: str) -> str:
    """proto field name → its lowerCamelCase JSON name."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@functools.cache  # one entry per message class of the spec: a bounded set
def field_names(cls: type[betterproto2.Message]) -> dict[str, str]:
    """Every accepted JSON key of ``cls`` → the proto field name (do not modify)."""
    names: dict[str, str] = {}
    for name in proto_meta(cls).meta_by_field_name:
        names[name] = name
        names[camel(name)] = name
    return names


def normalize_message(cls: type[betterproto2.Message], obj: Any, path: str = "") -> dict[str, Any]:
    """Check ``obj`` against message ``cls``; return it keyed by proto field names.

    Raises:
        PalyraError: ``MALFORMED_REQUEST`` for unknown fields, duplicates, wrong
            types, out-of-range numbers, bad enums/base64, or two members of a oneof.
    """
    if not isinstance(obj, Mapping):
        raise bad_request(path, "expected a JSON object")
    meta = proto_meta(cls)
    names = field_names(cls)
    out: dict[str, Any] = {}
    oneofs: dict[str, str] = {}
    for key, value in obj.items():
        name = names.get(key) if isinstance(key, str) else None
        where = f"{path}.{key}" if path else str(key)
        if name is None:
            raise bad_request(where, "unknown field")
        if name in out:
            raise bad_request(where, "field given twice")
        if value is None:
            continue  # proto3 JSON: null means the default value
        fm = meta.meta_by_field_name[name]
        if fm.group:
            if fm.group in oneofs:
                raise bad_request(where, f"only one of oneof '{fm.group}' may be set "
                                         f"(also got '{oneofs[fm.group]}')")
            oneofs[fm.group] = name
        out[name] = _field(meta, name, fm, value, where)
    return out


def _field(meta: Any, name: str, fm: Any, value: Any, where: str) -> Any:
    # ``meta``: the message's ``proto_meta``, read once per message, not once per field.
    if fm.proto_type == "map":
        if not isinstance(value, Mapping):
            raise bad_request(where, "expected a JSON object (map)")
        key_meta, value_meta = fm.map_meta
        value_cls = meta.cls_by_field.get(f"{name}.value")
        return {
            str(_scalar(key_meta.proto_type, None, k, f"{where}[{k}]")):
                _single(value_meta.proto_type, value_cls, v, f"{where}[{k}]")
            for k, v in value.items()
        }
    item_cls = meta.cls_by_field.get(name)
    if fm.repeated:
        if not isinstance(value, list):
            raise bad_request(where, "expected a JSON array")
        return [_single(fm.proto_type, item_cls, v, f"{where}[{i}]") for i, v in enumerate(value)]
    return _single(fm.proto_type, item_cls, value, where)


def _single(proto_type: str, item_cls: Any, value: Any, where: str) -> Any:
    if proto_type == "message":
        return normalize_message(item_cls, value, where)
    return _scalar(proto_type, item_cls, value, where)


def _scalar(proto_type: str, item_cls: Any, value: Any, where: str) -> Any:
    if proto_type == "string":
        if not isinstance(value, str):
            raise bad_request(where, "expected a string")
        return value
    if proto_type == "bool":
        if not isinstance(value, bool):
            raise bad_request(where, "expected true or false")
        return value
    if proto_type in _INT_RANGES:
        return _integer(proto_type, value, where)
    if proto_type in ("float", "double"):
        if isinstance(value, str) and value in _FLOAT_WORDS:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise bad_request(where, "expected a number")
        try:
            return float(value)
        except ValueError:
            raise bad_request(where, "expected a number") from None
    if proto_type == "bytes":
        if not isinstance(value, str):
            raise bad_request(where, "expected base64 text")
        try:
            padded = value + "=" * (-len(value) % 4)
            base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
        except (binascii.Error, ValueError):
            raise bad_request(where, "invalid base64") from None
        return value
    if proto_type == "enum":
        return enum_name(item_cls, value, where)
    raise bad_request(where, f"unsupported field type {proto_type}")


def _integer(proto_type: str, value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise bad_request(where, "expected an integer")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        # ASCII digits only: int() would also take "1_000", "+5" and other scripts' digits,
        # which the document's patterns (and other JSON readers) do not.
        digits = value.strip()
        if not _DECIMAL.fullmatch(digits):
            raise bad_request(where, "expected an integer")
        value = int(digits, 10)
    if not isinstance(value, int):
        raise bad_request(where, "expected an integer")
    low, high = _INT_RANGES[proto_type]
    if not low <= value <= high:
        raise bad_request(where, f"out of range for {proto_type}")
    return value


def enum_name(enum_cls: type[enum.IntEnum], value: Any, where: str) -> str:
    """An enum given by number, full proto name or short name → its full proto name."""
    members = list(enum_cls)
    if isinstance(value, int) and not isinstance(value, bool):
        for member in members:
            if member.value == value:
                return str(member.proto_name)  # type: ignore[attr-defined]
        raise bad_request(where, f"unknown enum number {value}")
    if isinstance(value, str):
        wanted = value.strip().upper()
        for member in members:
            full = str(member.proto_name)  # type: ignore[attr-defined]
            if wanted in (full, member.name):
                return full
        choices = ", ".join(m.name.lower() for m in members if m.value)
        raise bad_request(where, f"unknown value {value!r} (one of: {choices})")
    raise bad_request(where, "expected an enum name")
