"""A skill's manifest, ``skill.json`` (pure: parse and check).

A skill is a directory holding ``skill.json`` and a WebAssembly module
(``.wasm``, or ``.wat`` text the runtime assembles). The manifest names the
skill, its version, the module and its SHA-256 (checked before the module is
compiled), the tools it offers, and the capabilities it asks for: network
hosts (reached only through the ``palyra.http_get`` host function) and
workspace paths (the only directories WASI opens to it).

Tools use the *numbers* ABI: the export takes one ``f64`` per declared
parameter, in order, and returns one number; the model sees
``{"result": value}``.
"""

from __future__ import annotations

import re

import msgspec

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
_TOOL = re.compile(r"[a-z0-9][a-z0-9_]{0,31}")
_HOST = re.compile(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?")


class SkillTool(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One tool of a skill: its export and its numeric parameters."""

    name: str
    description: str
    export: str
    params: list[str] = []


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
    # base64 ed25519 signature of signing_message(); required when the daemon
    # trusts publisher keys ([tools] skill_publisher_keys).
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
        if not _TOOL.fullmatch(tool.name):
            raise ManifestError(f"tool name {tool.name!r} must match {_TOOL.pattern}")
        if len(set(tool.params)) != len(tool.params):
            raise ManifestError(f"tool {tool.name}: a parameter is named twice")
    for host in manifest.capabilities.network:
        if not _HOST.fullmatch(host):
            raise ManifestError(f"network host {host!r} is not a host name")
    for path in manifest.capabilities.filesystem:
        if path.startswith("/") or ".." in path.split("/") or not path:
            raise ManifestError(f"filesystem path {path!r} must be relative to the workspace")
    return manifest


def signing_message(manifest: SkillManifest) -> bytes:
    """What a publisher signs: the skill, its version, its module's digest and
    what it asks for (so a signed skill cannot be granted more afterwards)."""
    caps = manifest.capabilities
    return "\n".join(["palyra.skill.v1", manifest.name, manifest.version, manifest.sha256,
                      ",".join(sorted(caps.network)), ",".join(sorted(caps.filesystem))]
                     ).encode()


def input_schema(tool: SkillTool) -> dict[str, object]:
    """The JSON Schema of a numbers-ABI tool: an object of required numbers."""
    return {"type": "object", "properties": {p: {"type": "number"} for p in tool.params},
            "required": list(tool.params), "additionalProperties": False}
