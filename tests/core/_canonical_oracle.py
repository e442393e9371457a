"""Frozen copy of palyra.core.canonical.normalize at 831e574 (test oracle, do not optimise)."""

# ruff: noqa
# mypy: ignore-errors

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from palyra.core.errors import InvalidArgument

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
MAX_DEPTH = 64
JsonValue = object


def normalize(value: object, path: str = "$", depth: int = 0) -> JsonValue:
    """Return a plain copy of ``value`` restricted to the JSON model.

    Tuples become lists, other mappings become dicts, ``str``/``int``/``float``
    subclasses (e.g. enums) become their base type.

    Raises:
        InvalidArgument: when a value is outside the JSON model, an int does
            not fit in signed 64 bits, a float is NaN or infinite, a string is
            not encodable as UTF-8, or nesting is deeper than ``MAX_DEPTH``.
    """
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
            out[str(key)] = normalize(item, f"{path}.{key}", depth + 1)
        return out
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray | memoryview):
        return [normalize(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
    raise InvalidArgument(
        f"value of type {type(value).__name__} at {path} is not JSON-compatible",
        details={"path": path},
    )


def _check_utf8(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"string at {path} is not valid UTF-8") from exc
