"""ListSkills and ReloadSkills: the daemon's installed WebAssembly skills (operators).

The skills host is the daemon's (``daemon.skills``); an app built without one
(tests, tools) has no skills directory: it lists none and cannot reload.
"""

from __future__ import annotations

from typing import Any, Protocol

from palyra_gen.palyra import v1 as pb

from palyra.app._access import require_operator
from palyra.app._base import AppBase
from palyra.app.context import CallContext
from palyra.core.errors import ErrorCode, PalyraError


class SkillsHost(Protocol):
    """What the app needs of the daemon's skills host (``palyra.daemon.skills``)."""

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every installed skill as last loaded, by name."""
        ...

    async def reload(self, principal: str) -> tuple[list[dict[str, Any]], int]:
        """Load what changed; the changes and the last one's journal position."""
        ...


def skill_proto(record: dict[str, Any]) -> pb.Skill:
    """The wire form of a scan record (``ScannedSkill.record``)."""
    enabled = record.get("state") == "enabled"
    return pb.Skill(name=record["skill"], skill_id=record.get("skill_id", ""),
                    state=record["state"], module_sha256=record.get("module_sha256", ""),
                    capabilities=list(record.get("capabilities", ())),
                    tools=list(record.get("tools", ())) if enabled else [],
                    reason=record.get("reason", ""))


class SkillsApi(AppBase):
    """The skills RPCs of GatewayService."""

    skills: SkillsHost | None = None

    async def list_skills(self, ctx: CallContext,
                          request: pb.ListSkillsRequest) -> pb.ListSkillsResponse:
        """Every installed skill with its state (operators)."""
        require_operator(ctx, "ListSkills")
        records = self.skills.records if self.skills is not None else []
        return pb.ListSkillsResponse(skills=[skill_proto(r) for r in records])

    async def reload_skills(self, ctx: CallContext,
                            request: pb.ReloadSkillsRequest) -> pb.ReloadSkillsResponse:
        """Load what changed in the skills directory, journaled as the caller's (operators)."""
        identity = require_operator(ctx, "ReloadSkills")
        if self.skills is None:
            raise PalyraError("this server runs no skills directory",
                              code=ErrorCode.UNIMPLEMENTED)
        changes, position = await self.skills.reload(identity.principal)
        return pb.ReloadSkillsResponse(
            skills=[skill_proto(r) for r in self.skills.records],
            changes=[pb.SkillChange(name=c["skill"], change=c["change"],
                                    skill_id=c["skill_id"], module_sha256=c["module_sha256"])
                     for c in changes],
            journal_position=position)
