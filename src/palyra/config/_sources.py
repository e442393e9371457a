"""Where each effective setting comes from: ``palyra config show``.

Pure over the layers of :func:`palyra.config._load.config_layers`: a setting's
source is the last layer that names it (or anything under it, for tables such
as ``policy.tool_postures``), else ``default``. Secrets are shown only as set
or unset.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from palyra.config._model import PalyraConfig

Layer = dict[str, dict[str, Any]]

# Field names whose values are credentials: shown as "(set)" / "(unset)".
_SECRET_WORDS = ("token", "secret", "password", "api_key")
_NOT_SECRET_SUFFIXES = ("_env", "_file", "_path", "_header")


@dataclasses.dataclass(frozen=True, slots=True)
class Setting:
    """One leaf of the effective config."""

    name: str
    value: Any
    source: str


def is_secret(name: str) -> bool:
    """Whether ``name``'s value must not be printed."""
    leaf = name.rsplit(".", 1)[-1]
    return any(w in leaf for w in _SECRET_WORDS) and not leaf.endswith(_NOT_SECRET_SUFFIXES)


def _flatten(prefix: str, value: Any) -> Iterator[str]:
    yield prefix
    if isinstance(value, Mapping):
        for key, inner in value.items():
            yield from _flatten(f"{prefix}.{key}" if prefix else str(key), inner)


def _named(layer: Layer) -> set[str]:
    names: set[str] = set()
    for section, values in layer.items():
        for key, value in values.items():
            names.update(_flatten(f"{section}.{key}" if section else key, value))
    return names


def _leaves(prefix: str, obj: Any) -> Iterator[tuple[str, Any]]:
    for f in dataclasses.fields(obj):
        name = f"{prefix}{f.name}"
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            yield from _leaves(f"{name}.", value)
        else:
            yield name, value


def settings_with_sources(config: PalyraConfig,
                          layers: list[tuple[str, Layer]]) -> list[Setting]:
    """Every leaf setting of ``config``, its printable value and the layer that set it."""
    named = [(source, _named(layer)) for source, layer in layers]
    out: list[Setting] = []
    for name, value in _leaves("", config):
        source = "default"
        for layer_source, names in named:
            if name in names or any(n.startswith(f"{name}.") for n in names):
                source = layer_source
        out.append(Setting(name, _printable(name, value), source))
    return out


def _printable(name: str, value: Any) -> Any:
    if is_secret(name):
        return "(set)" if value else "(unset)"
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (tuple, frozenset, set)):
        return sorted(map(str, value)) if isinstance(value, (frozenset, set)) else [
            str(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _printable(f"{name}.{k}", v) for k, v in value.items()}
    if hasattr(value, "value") and hasattr(value, "name"):  # enums
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _printable(f"{name}.{k}", v) for k, v in dataclasses.asdict(value).items()}
    return value
