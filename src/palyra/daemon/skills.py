"""The daemon's installed skills: loaded at start, reloaded when ``palyra skills`` changes them.

At start every installed skill is journaled (``skill.loaded``: module digest,
capabilities, state). ``ReloadSkills`` (which the CLI calls after each change
when a daemon runs on the data dir) scans the directory again: the tools of a
skill that changed leave the registry, those of an enabled one join it, and
each change is journaled as ``skill.changed`` under the caller's principal, so
a quarantine takes effect at once and the journal says who swapped which module.
Wasmtime is imported only when there are skills (or a reload asks for them).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from palyra.journal import EventDraft, JournalStore
from palyra.tools import ToolRegistry, ToolsConfig

if TYPE_CHECKING:
    from palyra.tools.skills import ScannedSkill

_log = structlog.get_logger("palyra.daemon")
DAEMON = "system:daemon"


class SkillsHost:
    """The skills directory as the running daemon sees it."""

    def __init__(self, tools: ToolsConfig, skills_dir: Path, registry: ToolRegistry,
                 store: JournalStore) -> None:
        self._tools = tools
        self._dir = skills_dir
        self._registry = registry
        self._store = store
        self._records: dict[str, dict[str, Any]] = {}
        self._registered: dict[str, tuple[str, ...]] = {}  # skill -> its tools in the registry
        self._lock = asyncio.Lock()

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every installed skill as last loaded, by name."""
        return [self._records[name] for name in sorted(self._records)]

    async def start(self) -> None:
        """Load the installed skills and journal what this daemon runs with."""
        if not (self._dir.is_dir() and any(self._dir.iterdir())):
            return
        scanned = self._scan()
        self._apply(scanned, {found.record["skill"] for found in scanned})
        # Which skills (module digests, capabilities, states) this daemon runs with,
        # on the hash-chained journal: a changed or swapped skill shows there.
        await self._store.append([EventDraft(kind="skill.loaded", actor=DAEMON, principal=DAEMON,
                                             payload=found.record) for found in scanned])
        _log.info("skills", skills=[(r["skill"], r["state"]) for r in self.records])

    async def reload(self, principal: str) -> tuple[list[dict[str, Any]], int]:
        """Load what changed in the directory; journal each change as ``principal``'s.

        Returns:
            The changes (``skill_changes``) and the position of the last one's
            event (0 when nothing changed).
        """
        from palyra.tools.skills import skill_changes

        async with self._lock:
            scanned = await asyncio.to_thread(self._scan)
            after = {found.record["skill"]: found.record for found in scanned}
            changes = skill_changes(self._records, after)
            if not changes:
                return [], 0
            # Journaled first: a change that could not be recorded is not applied.
            stored = await self._store.append([
                EventDraft(kind="skill.changed", actor=principal, principal=principal,
                           payload=change) for change in changes])
            self._apply(scanned, {change["skill"] for change in changes})
            _log.info("skills reloaded", by=principal,
                      changes=[(c["skill"], c["change"]) for c in changes])
            return changes, stored[-1].position

    def _scan(self) -> list[ScannedSkill]:
        from palyra.tools.skills import Limits, scan_skills

        return scan_skills(self._dir, limits=Limits(self._tools.skill_fuel,
                                                    self._tools.skill_memory_bytes),
                           fetch_allow=self._tools.fetch_allow,
                           publisher_keys=self._tools.skill_publisher_keys)

    def _apply(self, scanned: list[ScannedSkill], changed: set[str]) -> None:
        """Swap the registry's tools of the ``changed`` skills for what the scan loaded."""
        for name in changed:
            for tool_name in self._registered.pop(name, ()):
                self._registry.unregister(tool_name)
            self._records.pop(name, None)
        for found in scanned:
            name = found.record["skill"]
            if name not in changed:
                continue
            self._records[name] = found.record
            for tool in found.tools:
                self._registry.register(tool)
            if found.tools:
                self._registered[name] = tuple(tool.name for tool in found.tools)
