"""Loading, validating and identifying the active Cedar policy set.

cedarpy parses a whole policy set at once and reports errors without source
positions, so each file is handled on its own:

1. Parse the file. On a parse error, find the line by re-parsing growing
   line prefixes: the first prefix that fails with anything other than
   "unexpected end of input" ends at the offending line.
2. Validate the file against the schema. Validation errors name a positional
   id (``policyN``); a small scanner maps N to the line where statement N
   starts.
3. Convert the file to Cedar's JSON form and rename its policies to stable
   ids: the ``@id`` annotation if present, else ``<file>#N``. (``@id`` is not a
   policy id to Cedar itself, so without this decisions would name
   ``policy0``, ``policy1``... which shift whenever a file changes.)

All files are then merged into one JSON policy set and parsed once into a
reusable ``PolicySet`` handle.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.resources
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import cedarpy

from palyra.core.errors import ErrorCode, PalyraError

POLICY_HASH_DOMAIN = b"palyra.policy.set.v1"
SCHEMA_NAME = "schema.cedarschema"


@dataclasses.dataclass(frozen=True, slots=True)
class PolicySource:
    """One policy file: its display name (``defaults/tools.cedar``) and text."""

    name: str
    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class LoadedPolicies:
    """The validated, merged policy set.

    Attributes:
        policy_set: Pre-parsed handle for ``cedarpy.is_authorized``.
        schema: Pre-parsed schema handle.
        policy_ids: Stable ids of all policies, in load order.
        policy_hash: ``policy_hash(sources, schema_text)``.
        sources: The files, in load order.
    """

    policy_set: Any
    schema: Any
    policy_ids: tuple[str, ...]
    policy_hash: str
    sources: tuple[PolicySource, ...]


def _invalid(message: str) -> PalyraError:
    return PalyraError(message, code=ErrorCode.POLICY_INVALID)


def statement_starts(text: str) -> list[int]:
    """Offsets where each Cedar statement starts (annotations included).

    Statements end at a ``;`` outside string literals and ``//`` comments;
    a statement starts at its first character that is neither whitespace nor
    comment.
    """
    starts: list[int] = []
    i, n = 0, len(text)
    in_statement = False
    while i < n:
        c = text[i]
        if c == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if c.isspace():
            i += 1
            continue
        if not in_statement:
            starts.append(i)
            in_statement = True
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c == ";":
            in_statement = False
        i += 1
    return starts


def line_of(text: str, offset: int) -> int:
    """1-based line number of a character offset."""
    return text.count("\n", 0, offset) + 1


def parse_error_line(text: str) -> int:
    """Line of the first parse error in ``text`` (see the module docstring)."""
    lines = text.splitlines(keepends=True)
    for count in range(1, len(lines) + 1):
        try:
            cedarpy.PolicySet.from_str("".join(lines[:count]))
        except ValueError as exc:
            if "unexpected end of input" not in str(exc):
                return count
    return max(1, len(lines))


def _parse_file(source: PolicySource, schema: Any) -> dict[str, Any]:
    """Parse and validate one file; return its static policies by stable id."""
    try:
        cedarpy.PolicySet.from_str(source.text)
    except ValueError as exc:
        line = parse_error_line(source.text)
        raise _invalid(f"policy file {source.name} line {line}: parse error: {exc}") from exc
    result = cedarpy.validate_policies(source.text, schema)
    if not result.validation_passed:
        starts = statement_starts(source.text)
        problems = []
        for error in result.errors:
            where = ""
            index = error.policy_id.removeprefix("policy")
            if index.isdigit() and int(index) < len(starts):
                where = f" line {line_of(source.text, starts[int(index)])}"
            problems.append(f"policy file {source.name}{where}: {error.error}")
        raise _invalid("; ".join(problems))
    est = json.loads(cedarpy.policies_to_json_str(source.text))
    if est.get("templates"):
        raise _invalid(f"policy file {source.name}: templates are not supported")
    renamed: dict[str, Any] = {}
    for positional, policy in est.get("staticPolicies", {}).items():
        position = int(positional.removeprefix("policy"))
        stable = (policy.get("annotations") or {}).get("id") or f"{source.name}#{position}"
        if stable in renamed:
            raise _invalid(f"policy file {source.name}: duplicate policy id {stable!r}")
        renamed[stable] = policy
    return renamed


def policy_hash(sources: Iterable[PolicySource], schema_text: str) -> str:
    """SHA-256 hex over the whole active policy set and the schema.

    Input: the domain tag ``palyra.policy.set.v1``, then for each file sorted
    by name, and the schema as ``schema.cedarschema``, the UTF-8 name and the
    UTF-8 content, each with a u64 big-endian length prefix.
    """
    h = hashlib.sha256(POLICY_HASH_DOMAIN)
    entries = sorted([(s.name, s.text) for s in sources] + [(SCHEMA_NAME, schema_text)])
    for name, text in entries:
        for field in (name.encode(), text.encode()):
            h.update(len(field).to_bytes(8, "big") + field)
    return h.hexdigest()


def default_sources() -> tuple[str, list[PolicySource]]:
    """The shipped schema text and default policy files (package data)."""
    root = importlib.resources.files("palyra.policy").joinpath("defaults")
    schema_text = root.joinpath(SCHEMA_NAME).read_text(encoding="utf-8")
    files = sorted(
        (entry for entry in root.iterdir() if entry.name.endswith(".cedar")),
        key=lambda entry: entry.name,
    )
    return schema_text, [
        PolicySource(f"defaults/{entry.name}", entry.read_text(encoding="utf-8")) for entry in files
    ]


def config_sources(config_dir: Path) -> list[PolicySource]:
    """``<config_dir>/policies/*.cedar``, sorted by name (missing dir: none)."""
    directory = config_dir / "policies"
    if not directory.is_dir():
        return []
    out = []
    for path in sorted(directory.glob("*.cedar")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise _invalid(f"policy file policies/{path.name}: cannot read: {exc}") from exc
        out.append(PolicySource(f"policies/{path.name}", text))
    return out


def load_policies(config_dir: Path | None, *, include_defaults: bool = True) -> LoadedPolicies:
    """Load, validate and merge the shipped and configured policies.

    Args:
        config_dir: Daemon config dir; policies are read from its
            ``policies/`` subdirectory. ``None`` loads the defaults only.
        include_defaults: Load the shipped ``defaults/*.cedar`` too.

    Raises:
        PalyraError: ``POLICY_INVALID`` naming the file and line of a parse or
            schema-validation error, or a duplicate policy id.
    """
    schema_text, defaults = default_sources()
    try:
        schema = cedarpy.Schema.from_str(schema_text)
    except ValueError as exc:  # a packaging bug, but say so clearly
        raise _invalid(f"shipped Cedar schema is invalid: {exc}") from exc
    sources = (defaults if include_defaults else []) + (
        config_sources(config_dir) if config_dir is not None else []
    )
    merged: dict[str, Any] = {}
    for source in sources:
        for stable, policy in _parse_file(source, schema).items():
            if stable in merged:
                raise _invalid(f"policy file {source.name}: duplicate policy id {stable!r}")
            merged[stable] = policy
    document = {"staticPolicies": merged, "templates": {}, "templateLinks": []}
    policy_set = cedarpy.PolicySet.from_json_str(json.dumps(document))
    return LoadedPolicies(
        policy_set=policy_set,
        schema=schema,
        policy_ids=tuple(merged),
        policy_hash=policy_hash(sources, schema_text),
        sources=tuple(sources),
    )
