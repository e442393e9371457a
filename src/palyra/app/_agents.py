"""Agents: CRUD and bindings (operators only), and which agent serves a new run."""

from __future__ import annotations

from palyra_gen.palyra import v1 as pb

from palyra.agents import AgentRecord, BindingRecord
from palyra.app._access import require_operator
from palyra.app._base import AppBase
from palyra.app._convert import _POSTURE_PROTO, POSTURE_NAMES
from palyra.app.context import CallContext
from palyra.core.errors import InvalidArgument, NotFound

MAX_PAGE = 500


def agent_proto(a: AgentRecord) -> pb.Agent:
    """The wire form of an agent."""
    return pb.Agent(agent_id=a.agent_id, display_name=a.display_name,
                    system_prompt=a.system_prompt, provider=a.provider, model=a.model,
                    tools=list(a.tools), created_at_unix_ms=a.created_ms,
                    updated_at_unix_ms=a.updated_ms,
                    tool_postures={k: _POSTURE_PROTO[v] for k, v in a.tool_postures.items()},
                    fallbacks=list(a.fallbacks), response_cache=a.response_cache)


def binding_proto(b: BindingRecord) -> pb.AgentBinding:
    """The wire form of a binding."""
    return pb.AgentBinding(binding_id=b.binding_id, agent_id=b.agent_id, channel=b.channel,
                           conversation_id=b.conversation_id, session_key=b.session_key)


def _record(agent: pb.Agent | None, agent_id: str = "") -> AgentRecord:
    """The settings of ``agent``; its ``agent_id`` must be empty or ``agent_id``.

    The daemon picks agent ids: a client-chosen one is refused rather than
    silently replaced (a client that kept its own id would address nothing).
    """
    if agent is None:
        raise InvalidArgument("agent is required")
    if agent.agent_id and agent.agent_id != agent_id:
        raise InvalidArgument(
            "agent.agent_id is chosen by the daemon: leave it empty" if not agent_id else
            f"agent.agent_id {agent.agent_id!r} differs from the path's {agent_id!r}",
            details={"field": "agent.agent_id"})
    postures = {}
    for tool, posture in agent.tool_postures.items():
        if posture not in POSTURE_NAMES:
            raise InvalidArgument(f"tool_postures[{tool!r}] must be a posture",
                                  details={"field": "tool_postures"})
        postures[tool] = POSTURE_NAMES[posture]
    return AgentRecord(agent_id="", display_name=agent.display_name,
                       system_prompt=agent.system_prompt, provider=agent.provider,
                       model=agent.model, tools=list(agent.tools), tool_postures=postures,
                       fallbacks=[f.strip() for f in agent.fallbacks],
                       response_cache=agent.response_cache)


class AgentsApi(AppBase):
    """The agent RPCs of GatewayService."""

    def _routed(self, rec: AgentRecord) -> AgentRecord:
        """``rec``, once its provider, model and fallbacks name what the daemon serves.

        Raises:
            InvalidArgument: an unknown provider, or a model the provider does not offer.
        """
        models = self.engine.models
        models.validate([f"{rec.provider}/{rec.model}"], "agent.provider")
        models.validate(rec.fallbacks, "agent.fallbacks")
        return rec

    async def list_agents(self, ctx: CallContext,
                          request: pb.ListAgentsRequest) -> pb.ListAgentsResponse:
        """Agents in id order."""
        require_operator(ctx, "listing agents")
        limit = 100 if request.limit == 0 else max(1, min(request.limit, MAX_PAGE))
        page, after = self._agent_registry.page(request.after_agent_id, limit)
        return pb.ListAgentsResponse(agents=[agent_proto(a) for a in page],
                                     next_after_agent_id=after)

    async def get_agent(self, ctx: CallContext, request: pb.GetAgentRequest) -> pb.GetAgentResponse:
        """One agent."""
        require_operator(ctx, "reading agents")
        return pb.GetAgentResponse(agent=agent_proto(self._agent_registry.require(request.agent_id)))

    async def create_agent(self, ctx: CallContext,
                           request: pb.CreateAgentRequest) -> pb.CreateAgentResponse:
        """A new agent (the daemon picks its id; a client-chosen one is refused)."""
        who = require_operator(ctx, "creating agents")
        rec = await self._agent_registry.create(self._routed(_record(request.agent)),
                                                who.principal)
        return pb.CreateAgentResponse(agent=agent_proto(rec))

    async def update_agent(self, ctx: CallContext,
                           request: pb.UpdateAgentRequest) -> pb.UpdateAgentResponse:
        """Replace an agent's settings; runs already started keep theirs."""
        who = require_operator(ctx, "updating agents")
        rec = await self._agent_registry.update(
            request.agent_id, self._routed(_record(request.agent, request.agent_id)),
            who.principal)
        return pb.UpdateAgentResponse(agent=agent_proto(rec))

    async def delete_agent(self, ctx: CallContext,
                           request: pb.DeleteAgentRequest) -> pb.DeleteAgentResponse:
        """Remove an agent and its bindings."""
        who = require_operator(ctx, "deleting agents")
        return pb.DeleteAgentResponse(deleted=await self._agent_registry.delete(request.agent_id,
                                                                       who.principal))

    async def bind_agent(self, ctx: CallContext,
                         request: pb.BindAgentRequest) -> pb.BindAgentResponse:
        """Bind a session key, or a channel (and a conversation glob), to the agent."""
        who = require_operator(ctx, "binding agents")
        b = request.binding or pb.AgentBinding()
        # The daemon picks binding ids, and the path names the agent: a body that says
        # otherwise is refused, never silently rewritten.
        if b.binding_id:
            raise InvalidArgument("binding.binding_id is chosen by the daemon: leave it empty",
                                  details={"field": "binding.binding_id"})
        if b.agent_id and b.agent_id != request.agent_id:
            raise InvalidArgument(f"binding.agent_id {b.agent_id!r} differs from the path's "
                                  f"{request.agent_id!r}", details={"field": "binding.agent_id"})
        rec = await self._agent_registry.bind(request.agent_id, BindingRecord(
            binding_id="", agent_id=request.agent_id, channel=b.channel,
            conversation_id=b.conversation_id, session_key=b.session_key), who.principal)
        return pb.BindAgentResponse(binding=binding_proto(rec))

    async def list_agent_bindings(
            self, ctx: CallContext,
            request: pb.ListAgentBindingsRequest) -> pb.ListAgentBindingsResponse:
        """The agent's bindings."""
        require_operator(ctx, "listing agent bindings")
        self._agent_registry.require(request.agent_id)
        return pb.ListAgentBindingsResponse(
            bindings=[binding_proto(b) for b in self._agent_registry.bindings(request.agent_id)])

    async def unbind_agent(self, ctx: CallContext,
                           request: pb.UnbindAgentRequest) -> pb.UnbindAgentResponse:
        """Remove one binding (NOT_FOUND when the agent has no such binding)."""
        who = require_operator(ctx, "unbinding agents")
        if not await self._agent_registry.unbind(request.agent_id, request.binding_id,
                                                 who.principal):
            raise NotFound(f"agent {request.agent_id!r} has no binding {request.binding_id!r}",
                           details={"agent_id": request.agent_id,
                                    "binding_id": request.binding_id})
        return pb.UnbindAgentResponse(removed=True)
