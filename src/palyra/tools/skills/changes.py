"""What changed between two scans of the skills directory (pure).

A running daemon reloads its skills when ``palyra skills`` changes the
directory; each change is journaled, so the hash-chained journal says which
module ran when, and who swapped it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# What makes two scans of one skill the same skill: a changed module, manifest
# identity, capability or tool list is an ``updated`` skill.
_IDENTITY = ("skill_id", "module_sha256", "capabilities", "tools")


def skill_changes(before: Mapping[str, Mapping[str, Any]],
                  after: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One change per skill that differs, by name: ``installed``, ``removed``,
    ``updated``, or the new state (``enabled``, ``disabled``, ``quarantined``,
    ``refused``).

    Args:
        before, after: Scan records (``ScannedSkill.record``) by skill name.

    Returns:
        ``{"skill", "change", "state", "skill_id", "module_sha256"}`` each, by name.
    """
    changes: list[dict[str, Any]] = []
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name), after.get(name)
        if new is None:
            assert old is not None
            change, seen, state = "removed", old, "removed"
        elif old is None:
            change, seen, state = "installed", new, new["state"]
        elif any(old.get(key) != new.get(key) for key in _IDENTITY):
            change, seen, state = "updated", new, new["state"]
        elif old["state"] != new["state"]:
            change, seen, state = new["state"], new, new["state"]
        else:
            continue
        changes.append({"skill": name, "change": change, "state": state,
                        "skill_id": seen.get("skill_id", ""),
                        "module_sha256": seen.get("module_sha256", "")})
    return changes
