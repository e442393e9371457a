"""Skills: WebAssembly plugins run with Wasmtime (fuel, a memory cap, WASI
preopens only, network only through a filtered host function).

``register_skills(dir, registry, limits=...)`` loads every enabled skill and
registers its tools as ``skill.<name>.<tool>``; ``install``, ``set_state`` and
``installed`` back ``palyra skills``.
"""

from palyra.tools.skills.catalog import (
    STATES,
    install,
    installed,
    read_manifest,
    register_skills,
    set_state,
    state_of,
)
from palyra.tools.skills.manifest import ManifestError, SkillManifest, parse_manifest
from palyra.tools.skills.runtime import Limits

__all__ = [
    "STATES",
    "Limits",
    "ManifestError",
    "SkillManifest",
    "install",
    "installed",
    "parse_manifest",
    "read_manifest",
    "register_skills",
    "set_state",
    "state_of",
]
