"""Installed skills: a directory per skill under the skills directory, each one's
state beside it, and their tools in the registry as ``skill.<name>.<tool>``.

State is a file ``state`` in the skill's directory: absent or ``enabled``, or
``disabled`` (the operator turned it off) or ``quarantined`` (held for review).
Only enabled skills are registered, so a call to a disabled or quarantined
skill's tool is an unknown tool, which the policy denies before any approval.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import wasmtime

from palyra.core.capabilities import Capability
from palyra.tools._netguard import Network, parse_networks
from palyra.tools._registry import ToolRegistry
from palyra.tools._schema import argument_checker
from palyra.tools._spec import ToolContext, ToolError, ToolOutput, ToolSpec
from palyra.tools.skills.epochs import EpochClock
from palyra.tools.skills.manifest import (
    ManifestError,
    SkillManifest,
    SkillTool,
    input_schema,
    parse_manifest,
)
from palyra.tools.skills.runtime import Limits, LoadedSkill, engine, load, run

log = logging.getLogger("palyra.tools.skills")
State = Literal["enabled", "disabled", "quarantined"]
STATES: tuple[State, ...] = ("enabled", "disabled", "quarantined")
MANIFEST = "skill.json"


def read_manifest(directory: Path) -> SkillManifest:
    """The checked manifest of the skill in ``directory``.

    Raises:
        ManifestError: Missing or malformed.
    """
    try:
        raw = (directory / MANIFEST).read_bytes()
    except OSError as exc:
        raise ManifestError(f"{directory}: no readable {MANIFEST}") from exc
    return parse_manifest(raw)


def state_of(directory: Path) -> State:
    """A skill's state (``enabled`` when no state file says otherwise)."""
    try:
        text = (directory / "state").read_text().strip()
    except FileNotFoundError:
        return "enabled"
    # An unreadable state is treated as the most restrictive one.
    return next((s for s in STATES if s == text), "quarantined")


def set_state(directory: Path, state: State) -> None:
    """Record a skill's state (atomically)."""
    temp = directory / "state.tmp"
    temp.write_text(state + "\n")
    temp.replace(directory / "state")


def installed(skills_dir: Path) -> Iterator[Path]:
    """The skill directories, by name."""
    if skills_dir.is_dir():
        yield from sorted(p for p in skills_dir.iterdir() if (p / MANIFEST).is_file())


def install(source: Path, skills_dir: Path, publisher_keys: tuple[str, ...] = ()
            ) -> SkillManifest:
    """Copy a checked skill directory in as ``<skills_dir>/<name>`` (enabled).

    The module's SHA-256 must match the manifest's; an installed skill of the
    same name is replaced.

    Raises:
        ManifestError: Bad manifest; ToolError: the module's digest differs or
            it does not compile.
    """
    manifest = read_manifest(source)
    # Signature, digest and compilation are checked before anything moves.
    load(engine(), source, manifest, publisher_keys)
    target = skills_dir / manifest.name
    staging = skills_dir / f".{manifest.name}.installing"
    shutil.rmtree(staging, ignore_errors=True)
    skills_dir.mkdir(parents=True, exist_ok=True)
    staging.mkdir()
    for name in (MANIFEST, manifest.module):
        shutil.copyfile(source / name, staging / name)
    shutil.rmtree(target, ignore_errors=True)
    staging.replace(target)
    return manifest


def capabilities(manifest: SkillManifest) -> frozenset[Capability]:
    """What the policy sees: read-only unless the skill asks for hosts or paths."""
    caps: set[Capability] = set()
    if manifest.capabilities.network:
        caps.add(Capability.NETWORK)
    if manifest.capabilities.filesystem:
        caps.add(Capability.FILESYSTEM_WRITE)
    return frozenset(caps or {Capability.READ_ONLY})


# A pure skill (no hosts, no paths, no WASI) first runs on the event loop with this
# much fuel (well under a millisecond of work); a call that needs more runs again,
# from the start, in a worker thread with the full budget. Re-running is safe only
# because such a call can have no effect outside its own fresh store, and running
# on the loop only because it can make no call that blocks: a WASI module could
# sleep in ``poll_oneoff`` without using fuel, so it always runs in a thread.
INLINE_FUEL = 200_000


def number_checker(tool: SkillTool) -> Callable[[dict[str, Any]], str | None]:
    """The numbers ABI's argument check (what ``input_schema`` says, without
    a schema engine): exactly the declared parameters, each a number."""
    wanted = set(tool.params)

    def check(arguments: dict[str, Any]) -> str | None:
        if set(arguments) != wanted:
            return f"expected exactly the parameters {sorted(wanted)}, got {sorted(arguments)}"
        for name, value in arguments.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                return f"{name} must be a number"
        return None

    return check


def _spec(skill: LoadedSkill, tool: SkillTool, limits: Limits, allow: tuple[Network, ...],
          timeout_s: float) -> ToolSpec[Any]:
    pure = capabilities(skill.manifest) == {Capability.READ_ONLY} and not skill.uses_wasi
    # The module is stopped when the tool's timeout answers the model, not later.
    limits = dataclasses.replace(limits, wall_s=min(limits.wall_s, timeout_s))
    inline = dataclasses.replace(limits, fuel=min(limits.fuel, INLINE_FUEL))

    async def handler(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        if pure:
            try:
                value, facts = run(skill, tool, arguments, ctx.workspace_dir, inline, allow,
                                   ticking=False)
                return ToolOutput(value, facts=facts)
            except ToolError as exc:
                if exc.facts.get("skill.stopped") != "fuel" or inline.fuel == limits.fuel:
                    raise
        value, facts = await asyncio.to_thread(run, skill, tool, arguments, ctx.workspace_dir,
                                               limits, allow)
        return ToolOutput(value, facts=facts)

    return ToolSpec(f"skill.{skill.manifest.name}.{tool.name}", tool.description, dict,
                    capabilities(skill.manifest), handler, timeout_s=timeout_s,
                    executor="wasm", input_schema=input_schema(tool),
                    check_args=number_checker(tool) if tool.abi == "numbers" else
                    argument_checker(input_schema(tool)), origin=skill.manifest.skill_id)


@dataclasses.dataclass(frozen=True, slots=True)
class ScannedSkill:
    """One installed skill as a scan found it.

    Attributes:
        record: What the journal records of it: ``skill``, ``state``
            (``enabled``/``disabled``/``quarantined``/``refused``) and, when the
            manifest reads, ``skill_id``, ``module_sha256``, ``capabilities`` and
            ``tools`` (the tool names it offers); ``reason`` when refused.
        tools: The tools to register (enabled and loaded skills only).
    """

    record: dict[str, Any]
    tools: tuple[ToolSpec[Any], ...] = ()


def scan_skills(skills_dir: Path, *, limits: Limits, fetch_allow: tuple[str, ...] = (),
                publisher_keys: tuple[str, ...] = (), timeout_s: float = 30.0
                ) -> list[ScannedSkill]:
    """Check and load every installed skill (blocking: it compiles modules).

    ``fetch_allow`` are the networks ``http.fetch`` may reach besides public
    addresses; ``palyra.http_get`` applies the same filter. A skill that fails
    its checks is logged and comes back ``refused``.
    """
    allow = parse_networks(fetch_allow)
    wasm = engine()
    clock = EpochClock(wasm)  # one per engine: every skill's deadline counts its ticks
    scanned: list[ScannedSkill] = []
    for directory in installed(skills_dir):
        record: dict[str, Any] = {"skill": directory.name, "state": state_of(directory)}
        try:
            manifest = read_manifest(directory)
            record.update(skill_id=manifest.skill_id, module_sha256=manifest.sha256,
                          capabilities=sorted(capabilities(manifest)),
                          tools=[f"skill.{manifest.name}.{t.name}" for t in manifest.tools])
            if record["state"] != "enabled":
                log.info("skill %s is %s; not loaded", directory.name, record["state"])
                scanned.append(ScannedSkill(record))
                continue
            skill = load(wasm, directory, manifest, publisher_keys, clock)
        except (ManifestError, ToolError, OSError, wasmtime.WasmtimeError) as exc:
            log.warning("skill %s not loaded: %s", directory.name, exc)
            record.update(state="refused", reason=str(exc))
            scanned.append(ScannedSkill(record))
            continue
        scanned.append(ScannedSkill(record, tuple(
            _spec(skill, tool, limits, allow, timeout_s) for tool in manifest.tools)))
    return scanned


def register_skills(skills_dir: Path, registry: ToolRegistry, *, limits: Limits,
                    fetch_allow: tuple[str, ...] = (), publisher_keys: tuple[str, ...] = (),
                    timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """Load every enabled skill and register its tools (see :func:`scan_skills`).

    Returns:
        One record per installed skill (``ScannedSkill.record``).
    """
    scanned = scan_skills(skills_dir, limits=limits, fetch_allow=fetch_allow,
                          publisher_keys=publisher_keys, timeout_s=timeout_s)
    for found in scanned:
        for tool in found.tools:
            registry.register(tool)
    return [found.record for found in scanned]
