"""Canonical encoding of journal payloads.

A payload is a JSON-model value: ``dict`` with ``str`` keys, ``list``, ``str``,
``int`` (signed 64-bit), finite ``float``, ``bool`` or ``None``. Its canonical
bytes are MessagePack as written by msgspec with ``order="sorted"``:

* maps have their keys sorted by code point (equal to UTF-8 byte order);
* integers use the smallest MessagePack form (non-negative ones the ``uint``
  family, negative ones the ``int`` family);
* floats are always float64 (``0xcb``);
* strings use the smallest ``str`` form, arrays and maps the smallest header.

The same value always yields the same bytes, so hashes can be recomputed from
an exported JSON rendering of the payload. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from palyra.core.errors import InvalidArgument

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
# Deep nesting is never legitimate in an event payload and would otherwise
# surface as a RecursionError deep inside the encoder.
MAX_DEPTH = 64

_MSGPACK = msgspec.msgpack.Encoder(order="sorted")
_JSON = msgspec.json.Encoder(order="sorted")

JsonValue = Any
"""A plain JSON-model value (see the module docstring)."""


def normalize(value: object, path: str = "$", depth: int = 0) -> JsonValue:
    """Return a plain copy of ``value`` restricted to the JSON model.

    Tuples become lists, other mappings become dicts, ``str``/``int``/``float``
    subclasses (e.g. enums) become their base type.

    Raises:
        InvalidArgument: when a value is outside the JSON model, an int does
            not fit in signed 64 bits, a float is NaN or infinite, a string is
            not encodable as UTF-8, or nesting is deeper than ``MAX_DEPTH``.
    """
    # Fast path for the common case, plain dicts and lists of plain values: no
    # path strings, exact-type tests. Anything else (a subclass, a tuple, an
    # error to report) gives up and the general walk below starts over, so
    # results and error messages are the general walk's.
    kind = value.__class__
    if (kind is dict or kind is list) and depth < MAX_DEPTH:
        try:
            return _plain_dict(value, depth) if kind is dict else _plain_list(value, depth)  # type: ignore[arg-type]
        except (_NotPlain, UnicodeEncodeError):
            pass
    return _normalize(value, path, depth)


class _NotPlain(Exception):
    """Raised by the fast path: let the general walk handle this value."""


def _plain_leaf(item: object, depth: int) -> object:
    kind = item.__class__
    if kind is str:
        if not item.isascii():  # type: ignore[attr-defined]
            item.encode("utf-8")  # type: ignore[attr-defined]
        return item
    if kind is int:
        if not INT64_MIN <= item <= INT64_MAX:  # type: ignore[operator]
            raise _NotPlain
        return item
    if item is None or kind is bool:
        return item
    if kind is dict and depth < MAX_DEPTH:
        return _plain_dict(item, depth)  # type: ignore[arg-type]
    if kind is list and depth < MAX_DEPTH:
        return _plain_list(item, depth)  # type: ignore[arg-type]
    if kind is float and math.isfinite(item):  # type: ignore[arg-type]
        return item
    raise _NotPlain


def _plain_dict(value: dict[Any, Any], depth: int) -> dict[str, JsonValue]:
    # ``value`` sits at ``depth < MAX_DEPTH``, so its items may sit one deeper.
    depth += 1
    out: dict[str, JsonValue] = {}
    for key, item in value.items():
        if key.__class__ is not str:
            raise _NotPlain
        if not key.isascii():
            key.encode("utf-8")
        kind = item.__class__
        if kind is str:
            if not item.isascii():
                item.encode("utf-8")
            out[key] = item
        elif kind is int and INT64_MIN <= item <= INT64_MAX:
            out[key] = item
        else:
            out[key] = _plain_leaf(item, depth)
    return out


def _plain_list(value: list[Any], depth: int) -> list[JsonValue]:
    depth += 1
    return [_plain_leaf(item, depth) for item in value]


def _normalize(value: object, path: str = "$", depth: int = 0) -> JsonValue:
    if depth > MAX_DEPTH:
        raise InvalidArgument(f"payload nested deeper than {MAX_DEPTH} at {path}")
    if value is None or value is True or value is False:
        return value
    if isinstance(value, bool):  # bool subclasses do not exist; keep mypy honest
        return bool(value)
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise InvalidArgument(
                f"integer at {path} does not fit in signed 64 bits",
                details={"path": path},
            )
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgument(f"float at {path} is not finite", details={"path": path})
        return float(value)
    if isinstance(value, str):
        _check_utf8(value, path)
        return str(value)
    if isinstance(value, Mapping):
        out: dict[str, JsonValue] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidArgument(f"non-string key at {path}", details={"path": path})
            _check_utf8(key, path)
            out[str(key)] = _normalize(item, f"{path}.{key}", depth + 1)
        return out
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray | memoryview):
        return [_normalize(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
    raise InvalidArgument(
        f"value of type {type(value).__name__} at {path} is not JSON-compatible",
        details={"path": path},
    )


def _check_utf8(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"string at {path} is not valid UTF-8") from exc


def canonical_bytes(value: JsonValue) -> bytes:
    """Canonical MessagePack bytes of an already normalized value."""
    return _MSGPACK.encode(value)


def canonical_encoder() -> msgspec.msgpack.Encoder:
    """The encoder behind :func:`canonical_bytes`, for a hot caller to bind its ``encode``."""
    return _MSGPACK


def decode_canonical(data: bytes) -> JsonValue:
    """Decode canonical MessagePack bytes back to plain values."""
    return msgspec.msgpack.decode(data)


def canonical_json(value: JsonValue) -> bytes:
    """Compact JSON with sorted keys; the line format of exported bundles."""
    return _JSON.encode(value)
