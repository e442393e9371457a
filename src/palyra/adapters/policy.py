"""Binds ``PolicyPort`` to ``palyra.policy.PolicyGate`` (Cedar)."""

from __future__ import annotations

from palyra_gen.palyra import v1 as pb

from palyra.engine import ApprovalRecord, IdentityRec, ToolRequest, ToolVerdict
from palyra.policy import Outcome as GateOutcome
from palyra.policy import PolicyGate, Posture
from palyra.policy import ToolRequest as GateRequest
from palyra.tools import ToolRegistry, is_sensitive

SKILL_PREFIX = "skill."
_OUTCOMES: dict[GateOutcome, pb.ToolDecisionOutcome] = {
    GateOutcome.ALLOW: pb.ToolDecisionOutcome.ALLOW, GateOutcome.DENY: pb.ToolDecisionOutcome.DENY,
    GateOutcome.NEEDS_APPROVAL: pb.ToolDecisionOutcome.NEEDS_APPROVAL}


class GatePolicy:
    """The engine's view of the Cedar gate: tool decisions and who may decide approvals."""

    def __init__(self, gate: PolicyGate, registry: ToolRegistry) -> None:
        self._gate = gate
        self._registry = registry
        # A tool's capabilities as the gate takes them, per registered tool object
        # (a replaced tool is a new object, so its entry is rebuilt).
        self._caps: dict[str, tuple[object, frozenset[str]]] = {}

    @property
    def policy_hash(self) -> str:
        """Hash of the active policy set and schema."""
        return self._gate.policy_hash

    def decide_tool(self, request: ToolRequest) -> ToolVerdict:
        """Posture (session → config → default), budget and Cedar, as one verdict.

        A skill's tool (``skill.<name>.<tool>``) first needs Cedar's
        ``skill.execute``: a skill that is not loaded is denied there, before
        any approval (REFERENCE §5 flow step 1).
        """
        caps = self._capabilities(request.tool_name)
        if request.tool_name.startswith(SKILL_PREFIX):
            gate = self._skill_gate(request, caps)
            if gate is not None:
                return gate
        # No args digest: the gate never reads it (approvals compute their own).
        gate_request = GateRequest.of(
            request.identity.principal, request.tool_name, caps,
            session_id=request.session_id, run_id=request.run_id,
            channel=request.identity.channel)
        overrides = {name: Posture(value) for name, value in request.postures.items()
                     if value in Posture.__members__.values()}
        posture = self._gate.resolve_posture(request.tool_name, caps or frozenset(), overrides)
        budget_left = self._gate.config.run_tool_budget - request.calls_made
        decision = self._gate.check_tool(gate_request, posture=posture,
                                         budget_left=budget_left, approved=False)
        # Reference: HIGH by default; a read-only tool that asks only because
        # of its posture is MEDIUM, and so is process.run at tier C with a
        # read-only workspace (the tool says so).
        tool = self._registry.get(request.tool_name)
        stated = tool.risk_for(posture.value) if tool is not None else ""
        risk = stated or ("high" if caps is None or is_sensitive(caps) else "medium")
        # Only a tool that runs differently by posture has it taped (lean tapes).
        taped = posture.value if tool is not None and tool.follows_posture else ""
        return ToolVerdict(_OUTCOMES[decision.outcome], decision.reason,
                           decision.policy_hash, decision.policy_ids, risk, taped)

    def _skill_gate(self, request: ToolRequest, caps: frozenset[str] | None
                    ) -> ToolVerdict | None:
        """Cedar ``skill.execute``'s denial, or ``None`` when the skill may run."""
        skill = request.tool_name.removeprefix(SKILL_PREFIX).split(".", 1)[0]
        tool = self._registry.get(request.tool_name)
        skill_id = tool.origin if tool is not None else ""
        decision = self._gate.check_skill_execute(
            request.identity.principal, skill, skill_id=skill_id,
            state="enabled" if tool is not None else "unknown", tool_name=request.tool_name,
            capabilities=caps or frozenset(), session_id=request.session_id,
            channel=request.identity.channel)
        if decision.allowed:
            return None
        return ToolVerdict(pb.ToolDecisionOutcome.DENY, decision.reason, decision.policy_hash,
                           decision.policy_ids)

    def _capabilities(self, tool_name: str) -> frozenset[str] | None:
        tool = self._registry.get(tool_name)
        if tool is None:
            return None
        known = self._caps.get(tool_name)
        if known is not None and known[0] is tool:
            return known[1]
        caps = frozenset(str(c) for c in tool.capabilities)
        self._caps[tool_name] = (tool, caps)
        return caps

    def may_decide_approval(self, identity: IdentityRec, approval: ApprovalRecord) -> bool:
        """Cedar ``approval.decide`` with the caller's principal."""
        decision = self._gate.check_approval_decide(
            identity.principal, approval.approval_id,
            run_principal=approval.requested_by.principal, tool_name=approval.tool_name,
            session_id=approval.session_id, channel=identity.channel)
        return decision.allowed

    def posture_change(self, identity: IdentityRec, session_id: str, tool_name: str,
                       posture: str) -> tuple[bool, str]:
        """Cedar ``session.set_posture`` with the tool's capabilities (None: unknown tool)."""
        caps = self._capabilities(tool_name)
        decision = self._gate.check_posture_change(
            identity.principal, tool_name, posture or "inherit", caps,
            session_id=session_id, channel=identity.channel)
        return decision.allowed, decision.reason

    def learning_review(self, identity: IdentityRec, candidate_id: str, *, run_principal: str,
                        decision: str, kind: str, session_id: str) -> tuple[bool, str]:
        """Cedar ``learning.review``: may ``identity`` accept/reject this candidate, and why."""
        verdict = self._gate.check_learning_review(
            identity.principal, candidate_id, run_principal=run_principal, decision=decision,
            candidate_kind=kind, session_id=session_id)
        return verdict.allowed, verdict.reason

    def model_select(self, identity: IdentityRec, provider: str, model: str, *,
                     agent_id: str, in_agent_route: bool) -> tuple[bool, str]:
        """Cedar ``model.select``: may ``identity`` pick this provider/model, and why."""
        verdict = self._gate.check_model_select(identity.principal, provider, model,
                                                agent_id=agent_id,
                                                in_agent_route=in_agent_route)
        return verdict.allowed, verdict.reason

    def cron_delete(self, identity: IdentityRec, schedule_id: str, *,
                    owner: str) -> tuple[bool, str]:
        """Cedar ``cron.delete``: may ``identity`` delete this schedule, and why."""
        verdict = self._gate.check_cron_delete(identity.principal, schedule_id, owner=owner)
        return verdict.allowed, verdict.reason

    def memory_change(self, identity: IdentityRec, action: str, *, session_id: str = "",
                      count: int = 1) -> tuple[bool, str]:
        """Cedar ``memory.delete`` / ``memory.purge``, and why."""
        verdict = self._gate.check_memory_change(identity.principal, action,
                                                 session_id=session_id, count=count)
        return verdict.allowed, verdict.reason
