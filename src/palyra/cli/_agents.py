"""``palyra agents list | show | create | update | delete | bind | bindings | unbind`` (operators)."""

from __future__ import annotations

import argparse

from palyra_gen.palyra import v1

from palyra.cli._client import Stubs
from palyra.cli._command import Shown, SubParsers, add_command, add_group
from palyra.cli._render import format_ms
from palyra.cli._sessions import POSTURES

_AGENT_HEADER = ["AGENT", "NAME", "PROVIDER", "MODEL", "TOOLS", "UPDATED"]
_BINDING_HEADER = ["BINDING", "AGENT", "CHANNEL", "CONVERSATION", "SESSION KEY"]


def _agent_row(a: v1.Agent) -> list[str]:
    return [a.agent_id, a.display_name or "-", a.provider or "-", a.model or "-",
            ",".join(a.tools) or "-", format_ms(a.updated_at_unix_ms)]


def _binding_row(b: v1.AgentBinding) -> list[str]:
    return [b.binding_id, b.agent_id, b.channel or "-", b.conversation_id or "-",
            b.session_key or "-"]


def _posture(text: str) -> tuple[str, v1.ToolPosture]:
    tool, sep, posture = text.partition("=")
    if not sep or posture not in POSTURES or posture == "inherit":
        raise argparse.ArgumentTypeError(
            f"expected TOOL=always_allow|ask_each_time|disabled, not {text!r}")
    return tool, POSTURES[posture]


def _agent_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default="", help="display name")
    parser.add_argument("--system-prompt", default="", help="the agent's system prompt")
    parser.add_argument("--provider", default="", help="model provider (default: the daemon's)")
    parser.add_argument("--model", default="", help="model name (default: the provider's)")
    parser.add_argument("--fallback", dest="fallbacks", action="append", default=[],
                        metavar="PROVIDER[/MODEL]",
                        help="tried in order when the model fails before answering (repeat)")
    parser.add_argument("--response-cache", action="store_true",
                        help="answer repeated identical model requests from the journal")
    parser.add_argument("--tool", dest="tools", action="append", default=[],
                        help="a tool the agent may use (repeat; default: every tool)")
    parser.add_argument("--posture", dest="postures", action="append", default=[],
                        type=_posture, metavar="TOOL=POSTURE",
                        help="per-tool posture (repeat), e.g. add=ask_each_time")


def _agent_from(args: argparse.Namespace) -> v1.Agent:
    return v1.Agent(display_name=args.name, system_prompt=args.system_prompt,
                    provider=args.provider, model=args.model, tools=list(args.tools),
                    tool_postures=dict(args.postures), fallbacks=list(args.fallbacks),
                    response_cache=args.response_cache)


async def _list(stubs: Stubs, args: argparse.Namespace) -> Shown:
    agents: list[v1.Agent] = []
    after = ""
    while True:
        page = await stubs.gateway.list_agents(v1.ListAgentsRequest(after_agent_id=after,
                                                                    limit=500))
        agents += page.agents
        after = page.next_after_agent_id
        if not after:
            break
    return Shown(agents, _AGENT_HEADER, [_agent_row(a) for a in agents])


def _agent_lines(a: v1.Agent) -> str:
    postures = ", ".join(f"{tool}={v1.ToolPosture(p).name.lower()}"
                         for tool, p in sorted(a.tool_postures.items()))
    return "\n".join([f"agent          {a.agent_id}", f"name           {a.display_name or '-'}",
                      f"provider       {a.provider or '(daemon default)'}",
                      f"model          {a.model or '(provider default)'}",
                      f"fallbacks      {', '.join(a.fallbacks) or '-'}",
                      f"response cache {'on' if a.response_cache else 'off'}",
                      f"tools          {', '.join(a.tools) or '(all)'}",
                      f"postures       {postures or '-'}",
                      f"system prompt  {a.system_prompt or '-'}",
                      f"updated        {format_ms(a.updated_at_unix_ms)}"])


async def _show(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.gateway.get_agent(v1.GetAgentRequest(agent_id=args.agent_id))
    agent = answer.agent or v1.Agent()
    return Shown(agent, line=_agent_lines(agent))


async def _create(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.gateway.create_agent(v1.CreateAgentRequest(agent=_agent_from(args)))
    agent = answer.agent or v1.Agent()
    return Shown(agent, line=f"agent {agent.agent_id} created")


async def _update(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.gateway.update_agent(v1.UpdateAgentRequest(
        agent_id=args.agent_id, agent=_agent_from(args)))
    agent = answer.agent or v1.Agent()
    return Shown(agent, line=f"agent {agent.agent_id} updated")


async def _delete(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.gateway.delete_agent(v1.DeleteAgentRequest(agent_id=args.agent_id))
    return Shown(answer, line=f"agent {args.agent_id} "
                 + ("deleted" if answer.deleted else "was not there"))


async def _bind(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.gateway.bind_agent(v1.BindAgentRequest(
        agent_id=args.agent_id, binding=v1.AgentBinding(
            channel=args.channel_id, conversation_id=args.conversation,
            session_key=args.session_key)))
    binding = answer.binding or v1.AgentBinding()
    return Shown(binding, _BINDING_HEADER, [_binding_row(binding)])


async def _bindings(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.gateway.list_agent_bindings(
        v1.ListAgentBindingsRequest(agent_id=args.agent_id))
    return Shown(answer.bindings, _BINDING_HEADER, [_binding_row(b) for b in answer.bindings])


async def _unbind(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.gateway.unbind_agent(v1.UnbindAgentRequest(
        agent_id=args.agent_id, binding_id=args.binding_id))
    return Shown(answer, line=f"binding {args.binding_id} "
                 + ("removed" if answer.removed else "was not there"))


def add_parser(commands: SubParsers) -> None:
    """Register the ``agents`` group."""
    sub = add_group(commands, "agents", "agents (system prompt, model, tools, postures) and "
                                        "what they serve (operators)")
    add_command(sub, "list", "list agents", _list)
    add_command(sub, "show", "one agent's settings", _show).add_argument("agent_id")
    _agent_flags(add_command(sub, "create", "create an agent (the daemon picks its id)",
                             _create))
    update = add_command(sub, "update", "replace an agent's settings (runs already started "
                                        "keep theirs)", _update)
    update.add_argument("agent_id")
    _agent_flags(update)
    add_command(sub, "delete", "delete an agent and its bindings", _delete).add_argument(
        "agent_id")
    bind = add_command(sub, "bind", "bind a session key, or a channel and conversation, "
                                    "to an agent", _bind)
    bind.add_argument("agent_id")
    bind.add_argument("--session-key", default="", help="sessions with this key")
    bind.add_argument("--channel-id", default="", help="a channel, e.g. slack:acme")
    bind.add_argument("--conversation", default="",
                      help="a conversation id (or glob) within --channel-id")
    add_command(sub, "bindings", "list an agent's bindings", _bindings).add_argument("agent_id")
    unbind = add_command(sub, "unbind", "remove one binding", _unbind)
    unbind.add_argument("agent_id")
    unbind.add_argument("binding_id")
