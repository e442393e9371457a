"""The field plans of betterproto2's messages, read from the package it just generated.

The fast codecs (``render_codecs``) must agree with betterproto2's own ``to_dict``,
``from_dict``, ``bytes()`` and ``parse`` to the byte, so their plans are read from
the very metadata those methods walk (each class's ``_betterproto``: field numbers,
proto types, oneof groups, defaults, wrapped types, key casing) rather than
re-derived from the descriptors by betterproto2's naming rules.

Importing the staged package needs a fresh interpreter (it is named ``palyra_gen``
like the tree the generator may itself be checking), so :func:`read_plans` runs
this module as a script on the staged directory and reads back JSON.
"""

from __future__ import annotations

import importlib
import inspect
import json
import keyword
import os
import pkgutil
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

from codegen.diagnostics import ToolError
from codegen.layout import REPO_ROOT

#: The package whose messages get codecs (betterproto2 output for palyra's own protos).
ROOT_PACKAGE = "palyra_gen.palyra"


def read_plans(python_root: Path) -> list[dict[str, Any]]:
    """The plans of every message under ``python_root/palyra_gen/palyra``, by class."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(python_root), str(REPO_ROOT)))}
    proc = subprocess.run(
        [sys.executable, "-m", "codegen.codec_plans", str(python_root)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=env,
    )
    if proc.returncode != 0:
        raise ToolError(f"reading betterproto2's field plans failed:\n{proc.stderr}")
    plans: list[dict[str, Any]] = json.loads(proc.stdout)
    return plans


def _ref(cls: type[Any] | None) -> list[str] | None:
    """A class as ``[module, qualified name]`` (None for scalars)."""
    if cls is None or cls is type(None):
        return None
    return [cls.__module__, cls.__qualname__]


def _default(value: Any) -> Any:
    """A field's default as JSON: scalars as they are, an enum by number, else None.

    Only scalar defaults are ever compared against (messages, repeated and map
    fields are tested for presence), so that is all the plan carries.
    """
    if value is None or isinstance(value, str | bool | float):
        return value
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if isinstance(value, int):
        return int(value)
    return None


def _field(cls: type[Any], name: str, fm: Any, probe: Any) -> dict[str, Any]:
    from betterproto2.casing import safe_snake_case

    meta = typing.cast(Any, cls)._betterproto
    camel = _camel(name)
    # The JSON keys from_dict maps to this field without guessing: its camelCase and
    # its own name, each kept only if betterproto2's key rule gives this field back.
    keys = sorted({k for k in (camel, name) if safe_snake_case(k) == name})
    plan: dict[str, Any] = {
        "name": name,
        "number": fm.number,
        "proto_type": fm.proto_type,
        "repeated": bool(fm.repeated),
        "optional": bool(fm.optional),
        "group": fm.group,
        "unwrap": fm.unwrap is not None,
        "json_key": camel,
        "keys": keys,
        "cls": _ref(meta.cls_by_field.get(name)),
        "default": _default(probe._get_field_default(name)),
        "map": None,
    }
    if fm.map_meta:
        key_meta, value_meta = fm.map_meta
        plan["map"] = {
            "key_type": key_meta.proto_type,
            "value_type": value_meta.proto_type,
            "value_unwrap": value_meta.unwrap is not None,
            "value_cls": _ref(meta.cls_by_field.get(f"{name}.value")),
        }
    return plan


def _camel(name: str) -> str:
    head, *rest = name.rstrip("_").split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _custom_json(cls: type[Any]) -> bool:
    """True when the class parses JSON its own way (a wrapper, a hand-written from_dict)."""
    import betterproto2

    def overrides(attr: str) -> bool:
        base = betterproto2.Message.__dict__[attr].__func__
        return getattr(getattr(cls, attr, None), "__func__", None) is not base

    return (hasattr(cls, "from_wrapped") or overrides("from_dict")
            or overrides("_from_dict_init"))


def _message(cls: type[Any]) -> dict[str, Any]:
    meta = typing.cast(Any, cls)._betterproto
    probe = cls()
    fields = [_field(cls, name, fm, probe) for name, fm in meta.meta_by_field_name.items()]
    return {
        "cls": _ref(cls),
        "fields": fields,
        "identifiers": all(f["name"].isidentifier() and not keyword.iskeyword(f["name"])
                           for f in fields),
        "custom_json": _custom_json(cls),
    }


def _plans() -> list[dict[str, Any]]:
    import betterproto2

    root = importlib.import_module(ROOT_PACKAGE)
    modules = [root] + [importlib.import_module(info.name)
                        for info in pkgutil.walk_packages(root.__path__, f"{ROOT_PACKAGE}.")]
    classes = {cls for module in modules for _, cls in inspect.getmembers(module, inspect.isclass)
               if issubclass(cls, betterproto2.Message) and cls is not betterproto2.Message
               and cls.__module__.startswith(ROOT_PACKAGE)}
    return [_message(cls) for cls in sorted(classes, key=lambda c: (c.__module__,
                                                                     c.__qualname__))]


if __name__ == "__main__":
    sys.path.insert(0, sys.argv[1])
    json.dump(_plans(), sys.stdout, indent=1, sort_keys=True)
