"""Agents and bindings as data, and which binding routes a conversation (pure)."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

import msgspec

from palyra.core.errors import InvalidArgument

MAX_PROMPT = 16_000
MAX_NAME = 200
MAX_FALLBACKS = 8
POSTURES = frozenset({"always_allow", "ask_each_time", "disabled"})


class AgentRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One agent as stored (``agents`` table, ``agent:<id>``)."""

    agent_id: str
    display_name: str
    system_prompt: str = ""
    provider: str = ""
    model: str = ""
    tools: list[str] = msgspec.field(default_factory=list)
    tool_postures: dict[str, str] = msgspec.field(default_factory=dict)
    created_ms: int = 0
    updated_ms: int = 0
    # ``provider`` or ``provider/model`` each, tried in order after provider/model.
    fallbacks: list[str] = msgspec.field(default_factory=list)
    response_cache: bool = False


class BindingRecord(msgspec.Struct, frozen=True, kw_only=True):
    """(channel, conversation pattern) or a session key -> an agent."""

    binding_id: str
    agent_id: str
    channel: str = ""
    # A glob over conversation ids (``C123*``); empty with a channel: the whole channel.
    conversation_id: str = ""
    session_key: str = ""


def validate_agent(rec: AgentRecord) -> AgentRecord:
    """The record, or ``INVALID_ARGUMENT`` saying which field is wrong."""
    if not rec.display_name.strip() or len(rec.display_name) > MAX_NAME:
        raise InvalidArgument(f"display_name must be 1..{MAX_NAME} characters",
                              details={"field": "display_name"})
    if len(rec.system_prompt) > MAX_PROMPT:
        raise InvalidArgument(f"system_prompt is over {MAX_PROMPT} characters",
                              details={"field": "system_prompt"})
    if len(rec.fallbacks) > MAX_FALLBACKS or any(not f.strip() for f in rec.fallbacks):
        raise InvalidArgument(f"fallbacks: at most {MAX_FALLBACKS}, none empty",
                              details={"field": "fallbacks"})
    bad = sorted(v for v in rec.tool_postures.values() if v not in POSTURES)
    if bad:
        raise InvalidArgument(f"unknown tool posture {bad[0]!r}", details={"field": "tool_postures"})
    return rec


def validate_binding(rec: BindingRecord) -> BindingRecord:
    """A binding names a session key, or a channel (and optionally a conversation glob)."""
    if not rec.session_key and not rec.channel:
        raise InvalidArgument("a binding needs a session_key or a channel",
                              details={"field": "binding"})
    return rec


def route_for(agent: AgentRecord) -> tuple[str, ...]:
    """The model route of the agent's runs: its provider/model, then its fallbacks.

    Empty when the agent names no provider, model or fallback (the default
    provider answers); an empty provider with a model is ``/model``: that model
    of the default provider.
    """
    if not (agent.provider or agent.model or agent.fallbacks):
        return ()
    primary = f"{agent.provider}/{agent.model}" if agent.model else agent.provider
    return (primary, *agent.fallbacks)


def postures_for(agent: AgentRecord, tool_names: Iterable[str]) -> dict[str, str]:
    """The agent's postures for its runs: its own, and ``disabled`` for every tool outside
    a non-empty ``tools`` list."""
    out = {name: "disabled" for name in tool_names if agent.tools and name not in agent.tools}
    out.update(agent.tool_postures)
    return out


def bound_agent(bindings: Iterable[BindingRecord], *, channel: str, conversation_id: str,
                session_key: str) -> str:
    """The agent a conversation routes to ("" for none). Deterministic: a session-key
    binding beats a conversation binding, which beats a whole-channel binding; among equals
    the longest pattern, then the lowest binding id, wins."""
    best: tuple[int, int, str, str] | None = None
    for b in bindings:
        if b.session_key:
            rank = 3 if session_key and b.session_key == session_key else 0
        elif b.channel and b.channel == channel:
            if b.conversation_id:
                rank = 2 if conversation_id and fnmatch.fnmatchcase(
                    conversation_id, b.conversation_id) else 0
            else:
                rank = 1
        else:
            rank = 0
        if not rank:
            continue
        key = (rank, len(b.conversation_id), _neg(b.binding_id), b.agent_id)
        if best is None or key > best:
            best = key
    return best[3] if best else ""


def _neg(binding_id: str) -> str:
    # Lower ids win a tie; max() picks the largest key, so invert the order.
    return "".join(chr(0x10FFFF - ord(c)) for c in binding_id)
