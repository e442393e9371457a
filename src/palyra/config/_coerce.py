"""Turn loosely typed values (TOML, env strings, CLI flags) into typed dataclasses.

Generic over any frozen config dataclass, so sections owned by other packages
(e.g. :class:`palyra.providers.ProviderConfig`) load the same way as ours.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from palyra.core.errors import ErrorCode, PalyraError

T = TypeVar("T")

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def config_error(where: str, problem: str) -> PalyraError:
    """A ``CONFIG_INVALID`` error naming the offending setting."""
    return PalyraError(f"invalid setting {where}: {problem}", code=ErrorCode.CONFIG_INVALID,
                       details={"setting": where})


def build(cls: type[T], raw: Mapping[str, Any], where: str = "") -> T:
    """Build dataclass ``cls`` from ``raw``; unknown keys and bad values are CONFIG_INVALID."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise config_error(f"{where}{unknown[0]}", "unknown setting")
    kwargs: dict[str, Any] = {}
    for name, value in raw.items():
        hint = hints[name]
        path = f"{where}{name}"
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, Mapping):
                raise config_error(path, "expected a table")
            kwargs[name] = build(typing.cast(type[Any], hint), value, f"{path}.")
        else:
            kwargs[name] = coerce(value, hint, path)
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:  # the section's own __post_init__ checks
        raise config_error(where.rstrip(".") or cls.__name__, str(exc)) from None


def coerce(value: Any, hint: Any, where: str) -> Any:
    """Coerce one value to ``hint``.

    Supported: str, bool, int, float, Path, enums, ``Literal``, ``X | None``
    (empty string → None), ``tuple[str, ...]`` / ``frozenset[str]`` (list or
    comma-separated string), ``tuple[SomeDataclass, ...]`` (an array of tables)
    and ``Mapping[str, V]`` (table or ``k=v,k2=v2``).
    """
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if not isinstance(value, Mapping):
            raise config_error(where, "expected a table")
        return build(hint, value, f"{where}.")
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(members) == 1 and len(typing.get_args(hint)) == 2:
            return None if value is None or value == "" else coerce(value, members[0], where)
        raise config_error(where, "union-typed settings are not supported")
    if origin in (Mapping, dict, collections.abc.Mapping):
        return _mapping(value, typing.get_args(hint)[1], where)
    if origin is frozenset:
        return frozenset(coerce(value, tuple[str, ...], where))
    if origin is typing.Literal:
        allowed = typing.get_args(hint)
        if value not in allowed:
            raise config_error(where, f"expected one of {', '.join(map(str, allowed))}")
        return value
    if origin is tuple and _dataclass_items(hint):
        # An array of tables ([[tools.mcp]]): each one a dataclass.
        if not isinstance(value, (list, tuple)):
            raise config_error(where, "expected an array of tables")
        item = typing.get_args(hint)[0]
        return tuple(coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is tuple:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise config_error(where, "expected a list of strings")
        return tuple(value)
    return _scalar(value, hint, where)


def _dataclass_items(hint: Any) -> bool:
    args = typing.get_args(hint)
    return (len(args) == 2 and args[1] is Ellipsis and dataclasses.is_dataclass(args[0])
            and isinstance(args[0], type))


def _mapping(value: Any, value_hint: Any, where: str) -> dict[str, Any]:
    if isinstance(value, str):
        pairs = [part.partition("=") for part in value.split(",") if part.strip()]
        if any(not sep for _, sep, _ in pairs):
            raise config_error(where, "expected key=value pairs")
        value = {k.strip(): v.strip() for k, _, v in pairs}
    if not isinstance(value, Mapping):
        raise config_error(where, "expected a table")
    return {str(k): coerce(v, value_hint, f"{where}.{k}") for k, v in value.items()}


def _scalar(value: Any, hint: Any, where: str) -> Any:
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise config_error(where, "expected a boolean")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise config_error(where, "expected an integer")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise config_error(where, "expected a number")
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            allowed = ", ".join(str(m.value) for m in hint)
            raise config_error(where, f"expected one of {allowed}") from None
    if hint is Path:
        if isinstance(value, (str, Path)) and str(value):
            return Path(value)
        raise config_error(where, "expected a path")
    if hint is str:
        if isinstance(value, str):
            return value
        raise config_error(where, "expected a string")
    raise config_error(where, f"unsupported setting type {hint!r}")
