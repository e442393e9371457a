"""State shared by the RPC groups of the facade."""

from __future__ import annotations

import time
from typing import NamedTuple

from palyra_gen.palyra import v1 as pb

from palyra.agents import AgentRegistry, bound_agent
from palyra.agents.model import postures_for, route_for
from palyra.app._convert import SCOPE_NAMES
from palyra.core.errors import InvalidArgument, PermissionDenied
from palyra.core.images import sniff
from palyra.engine import (
    ApprovalRecord,
    AttachmentRec,
    Engine,
    IdentityRec,
    budget_exhausted,
)
from palyra.journal import JournalStore
from palyra.usage import day_of


class ServingAgent(NamedTuple):
    """What a new run takes from the agent serving it (all empty for none)."""

    agent_id: str = ""
    postures: dict[str, str] = {}
    model_route: tuple[str, ...] = ()
    response_cache: bool = False


class AppBase:
    """The engine and the journal, as every RPC group sees them."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.store: JournalStore = engine.store
        self.started = time.monotonic()
        self._agent_registry = AgentRegistry(engine.store)

    def _serving_agent(self, identity: IdentityRec, agent_id: str,
                       session_key: str, model: str = "") -> ServingAgent:
        """The agent of a new run: the one asked for, else the one the session key (or
        the caller's channel) is bound to; all empty for none. ``model`` (``provider`` or
        ``provider/model``) replaces the primary of its route, if Cedar permits.

        Raises:
            NotFound: an ``agent_id`` that does not exist.
            InvalidArgument: a ``model`` the daemon does not serve.
            PermissionDenied: Cedar ``model.select`` refused ``model``.
        """
        serving = self._agent_of(identity, agent_id, session_key)
        if not model.strip():
            return serving
        models = self.engine.models
        models.validate([model], "model")
        [(target, _p)] = models.resolve([model.strip()])
        in_route = any(t == target for t, _p in models.resolve(serving.model_route))
        allowed, reason = self.engine.policy.model_select(
            identity, target.provider, target.model, agent_id=serving.agent_id,
            in_agent_route=in_route)
        if not allowed:
            raise PermissionDenied(reason, details={"field": "model"})
        return serving._replace(model_route=(target.label, *serving.model_route[1:]))

    async def _store_attachments(self, identity: IdentityRec, attachments: list[pb.Attachment],
                                 run_id: str) -> tuple[AttachmentRec, ...]:
        """Sniff and store an input's attachments for ``run_id``; their references for
        the input.

        The bytes go to the attachment store (``meta``, ``attachment:<sha256>``:
        content-addressed, so the same image is stored once) in a commit before the
        input's own, with the run's reference rows that keep them until retention
        prunes the run's tape; the client's MIME type is ignored, the bytes say
        what they are.

        Raises:
            InvalidArgument: an attachment that is empty, too big or not an image.
        """
        if not attachments:
            return ()
        infos = [sniff(bytes(a.data), name=a.name) for a in attachments]
        await self.engine.attachments.put(identity.principal, run_id, [
            (info.sha256, bytes(a.data)) for a, info in zip(attachments, infos, strict=True)])
        return tuple(AttachmentRec(i.sha256, i.mime_type, i.width, i.height, i.size_bytes,
                                   a.name[:200]) for a, i in zip(attachments, infos, strict=True))

    def _check_budgets(self, identity: IdentityRec, agent_id: str) -> None:
        """Refuse new work once an enforced budget of the caller or the agent is spent.

        Raises:
            PalyraError: ``BUDGET_EXHAUSTED`` naming the budget.
        """
        usage = self.engine.usage
        if not usage.config.budgets:
            return
        day = day_of(time.time_ns() // 1_000_000)
        for state in usage.budgets(identity.principal, agent_id, day):
            if state.exhausted and state.budget.mode == "enforced":
                raise budget_exhausted(state)

    def _agent_of(self, identity: IdentityRec, agent_id: str, session_key: str) -> ServingAgent:
        registry = self._agent_registry
        if not agent_id:
            agent_id = bound_agent(registry.bindings(), channel=identity.channel,
                                   conversation_id="", session_key=session_key)
            if not agent_id:
                return ServingAgent()
        agent = registry.require(agent_id)
        return ServingAgent(agent.agent_id, postures_for(agent, self.engine.tool_names()),
                            route_for(agent), agent.response_cache)

    async def _decide(self, identity: IdentityRec, approval_id: str,
                     decision: pb.ApprovalDecision, scope: pb.ApprovalScope,
                     ttl_seconds: int, reason: str) -> ApprovalRecord:
        """Decide an approval (DecideApproval and inline RunStream decisions)."""
        if decision not in (pb.ApprovalDecision.APPROVE, pb.ApprovalDecision.DENY):
            raise InvalidArgument("decision must be APPROVE or DENY", details={
                "approval_id": approval_id})
        scope_name = SCOPE_NAMES.get(scope, "once")
        return await self.engine.decide_approval(
            identity, approval_id, decision == pb.ApprovalDecision.APPROVE, scope_name,
            ttl_seconds, reason)
