"""Skills: WebAssembly plugins run with Wasmtime (fuel, a memory cap, WASI
preopens only, network only through a filtered host function).

``register_skills(dir, registry, limits=...)`` loads every enabled skill and
registers its tools as ``skill.<name>.<tool>``; ``install``, ``set_state`` and
``installed`` back ``palyra skills``; ``scan_skills`` and ``skill_changes`` let a
running daemon load what changed.
"""

from palyra.tools.skills.catalog import (
    STATES,
    ScannedSkill,
    install,
    installed,
    read_manifest,
    register_skills,
    scan_skills,
    set_state,
    state_of,
)
from palyra.tools.skills.changes import skill_changes
from palyra.tools.skills.manifest import ManifestError, SkillManifest, parse_manifest
from palyra.tools.skills.runtime import Limits

__all__ = [
    "STATES",
    "Limits",
    "ManifestError",
    "ScannedSkill",
    "SkillManifest",
    "install",
    "installed",
    "parse_manifest",
    "read_manifest",
    "register_skills",
    "scan_skills",
    "set_state",
    "skill_changes",
    "state_of",
]
