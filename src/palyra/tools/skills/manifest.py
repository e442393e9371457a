"""A skill's manifest, ``skill.json`` (pure: parse and check).

A skill is a directory holding ``skill.json`` and a WebAssembly module
(``.wasm``, or ``.wat`` text the runtime assembles). The manifest names the
skill, its version, the module and its SHA-256 (checked before the module is
compiled), the tools it offers, and the capabilities it asks for: network
hosts (reached only through the ``palyra.http_get`` host function) and
workspace paths (the only directories WASI opens to it).

A tool uses one of two ABIs:

* ``numbers`` (the default): the export takes one ``f64`` per declared
  parameter (``params``), in order, and returns one number; the model sees
  ``{"result": value}``.
* ``json``: the tool declares its arguments' JSON Schema (``input_schema``,
  checked before the call). The module exports ``memory`` and
  ``alloc(len: i32) -> i32``; the host writes the arguments there as UTF-8
  JSON and calls the export with ``(ptr: i32, len: i32)``, which returns an
  ``i64`` holding ``ptr << 32 | len`` of its UTF-8 JSON answer in ``memory``;
  the model sees that value.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import jsonschema.exceptions
import msgspec

from palyra.core.canonical import canonical_json
from palyra.tools._schema import argument_checker

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
_TOOL = re.compile(r"[a-z0-9][a-z0-9_]{0,31}")
_HOST = re.compile(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?")


class SkillTool(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One tool of a skill: its export, its ABI and its arguments (see the module doc)."""

    name: str
    description: str
    export: str
    params: list[str] = []
    abi: Literal["numbers", "json"] = "numbers"
    input_schema: dict[str, Any] | None = None


class SkillCapabilities(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a skill asks for beyond computing: hosts and workspace paths."""

    network: list[str] = []
    filesystem: list[str] = []


class SkillManifest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``skill.json``."""

    name: str
    version: str
    module: str
    sha256: str
    tools: list[SkillTool]
    capabilities: SkillCapabilities = SkillCapabilities()
    # base64 ed25519 signature of signing_message() (scheme palyra.skill.v2);
    # required when the daemon trusts publisher keys ([tools] skill_publisher_keys).
    signature: str = ""

    @property
    def skill_id(self) -> str:
        """``name@version``: how Cedar, the attestation and the CLI name it."""
        return f"{self.name}@{self.version}"


class ManifestError(ValueError):
    """The manifest is malformed; the message says what is wrong."""


def parse_manifest(raw: bytes) -> SkillManifest:
    """Decode and check ``skill.json``.

    Raises:
        ManifestError: Bad JSON, unknown fields, bad names, hosts or paths.
    """
    try:
        manifest = msgspec.json.decode(raw, type=SkillManifest)
    except msgspec.DecodeError as exc:
        raise ManifestError(f"skill.json: {exc}") from exc
    if not _NAME.fullmatch(manifest.name):
        raise ManifestError(f"skill name {manifest.name!r} must match {_NAME.pattern}")
    if not re.fullmatch(r"[0-9a-f]{64}", manifest.sha256):
        raise ManifestError("sha256 must be 64 lowercase hex digits")
    if "/" in manifest.module or manifest.module.startswith("."):
        raise ManifestError(f"module {manifest.module!r} must be a file beside skill.json")
    if not manifest.tools:
        raise ManifestError("a skill needs at least one tool")
    names = [tool.name for tool in manifest.tools]
    if len(set(names)) != len(names):
        raise ManifestError("two tools have the same name")
    for tool in manifest.tools:
        _check_tool(tool)
    for host in manifest.capabilities.network:
        if not _HOST.fullmatch(host):
            raise ManifestError(f"network host {host!r} is not a host name")
    for path in manifest.capabilities.filesystem:
        if path.startswith("/") or ".." in path.split("/") or not path:
            raise ManifestError(f"filesystem path {path!r} must be relative to the workspace")
    return manifest


def _check_tool(tool: SkillTool) -> None:
    if not _TOOL.fullmatch(tool.name):
        raise ManifestError(f"tool name {tool.name!r} must match {_TOOL.pattern}")
    if len(set(tool.params)) != len(tool.params):
        raise ManifestError(f"tool {tool.name}: a parameter is named twice")
    if tool.abi == "json" and (tool.params or tool.input_schema is None):
        raise ManifestError(f"tool {tool.name}: the json ABI takes an input_schema, not params")
    if tool.abi == "numbers" and tool.input_schema is not None:
        raise ManifestError(f"tool {tool.name}: the numbers ABI takes params, not an "
                            "input_schema")
    if tool.input_schema is not None:
        try:
            argument_checker(tool.input_schema)
        except jsonschema.exceptions.SchemaError as exc:
            raise ManifestError(f"tool {tool.name}: input_schema is not a JSON Schema: "
                                f"{exc.message}") from None


SIGNING_SCHEME = "palyra.skill.v2"
LEGACY_SCHEME = "palyra.skill.v1"


def signing_message(manifest: SkillManifest) -> bytes:
    """What a publisher signs (scheme ``palyra.skill.v2``): the whole manifest but its
    signature, as canonical JSON (sorted keys, every field, defaults included).

    So a signed skill can be neither granted more afterwards nor re-pointed: its
    name, version, module and digest, its capabilities, and each tool's name,
    description, export, ABI, parameters and input schema are all covered.
    """
    body = msgspec.to_builtins(manifest)
    body.pop("signature")
    return f"{SIGNING_SCHEME}\n".encode() + canonical_json(body)


def legacy_signing_message(manifest: SkillManifest) -> bytes:
    """What scheme ``palyra.skill.v1`` signed: name, version, module digest and
    capabilities only (not the tools). Such signatures are refused; this message only
    lets the refusal say so."""
    caps = manifest.capabilities
    return "\n".join([LEGACY_SCHEME, manifest.name, manifest.version, manifest.sha256,
                      ",".join(sorted(caps.network)), ",".join(sorted(caps.filesystem))]
                     ).encode()


def input_schema(tool: SkillTool) -> dict[str, Any]:
    """The JSON Schema of a tool's arguments: its own (json ABI), or an object of
    required numbers (numbers ABI)."""
    if tool.input_schema is not None:
        return dict(tool.input_schema)
    return {"type": "object", "properties": {p: {"type": "number"} for p in tool.params},
            "required": list(tool.params), "additionalProperties": False}
