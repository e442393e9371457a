"""GenAI spans folded from committed journal events: pure, deterministic, bounded.

A run's tape already says everything a trace needs, with a journal position
proving each part. :class:`SpanFold` turns a stream of events (live from the
writer, or read back from an export bundle) into finished :class:`SpanRecord`
values following the OpenTelemetry GenAI conventions:

* ``invoke_agent``: one agent loop of a run (``agent_loop`` STARTED → TERMINATED);
* ``chat``: one model call (``agent_loop`` TURN_STARTED → ``provider_turn_output``);
* ``execute_tool``: one tool call (its ``tool_proposal`` → ``tool_result``);
* ``apply_guardrail``: the Cedar decision carried by a ``tool_proposal``.

A run is one trace (its id from session and run id, so log lines can carry it
before any span exists); span ids come from (session id, journal position, span
name) by SHA-256 (:mod:`palyra.core.trace_ids`), so the same events give the
same trace wherever they are folded: the live daemon and
``palyra journal traces --bundle F`` agree byte for byte. Times are the events'
``ts_ms``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from palyra.core.trace_ids import derive_id, run_trace_id

INVOKE_AGENT = "invoke_agent"
CHAT = "chat"
EXECUTE_TOOL = "execute_tool"
APPLY_GUARDRAIL = "apply_guardrail"
SPAN_NAMES = (INVOKE_AGENT, CHAT, EXECUTE_TOOL, APPLY_GUARDRAIL)

# Runs whose loop is open at once, beyond which the oldest is dropped (its spans
# are never finished): memory stays bounded whatever the journal holds.
MAX_OPEN_RUNS = 10_000
_NS_PER_MS = 1_000_000

_STARTED = "AGENT_LOOP_PHASE_STARTED"
_TURN_STARTED = "AGENT_LOOP_PHASE_TURN_STARTED"
_TERMINATED = "AGENT_LOOP_PHASE_TERMINATED"
_DENY = "TOOL_DECISION_OUTCOME_DENY"


class EventLike(Protocol):
    """What the fold reads of an event: the journal header fields and the payload."""

    @property
    def position(self) -> int: ...
    @property
    def session_id(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def ts_ms(self) -> int: ...
    @property
    def payload(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One finished span; ``trace_id`` 128 bits, ``span_id``/``parent_id`` 64 bits."""

    name: str
    operation: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start_ns: int
    end_ns: int
    position: int
    attributes: Mapping[str, str | int | bool | tuple[str, ...]]
    error: str = ""


@dataclass(slots=True)
class _Open:
    """One run's open loop: its trace, the agent span, and the spans begun in it."""

    trace_id: int
    agent_id: int
    start_ms: int
    position: int
    session_id: str
    policy_hash: str = ""
    provider: str = ""
    turn_start: dict[int, tuple[int, int]] = field(default_factory=dict)  # turn → (pos, ts)
    tools: dict[str, tuple[int, int, str]] = field(default_factory=dict)  # call → (pos, ts, tool)


class SpanFold:
    """Feeds events in journal order; returns the spans each one finishes."""

    def __init__(self, max_open_runs: int = MAX_OPEN_RUNS) -> None:
        self._open: OrderedDict[str, _Open] = OrderedDict()
        self._max_open = max_open_runs

    @property
    def open_runs(self) -> int:
        """Runs with an agent loop begun and not yet ended."""
        return len(self._open)

    def feed(self, event: EventLike) -> list[SpanRecord]:
        """The spans ``event`` ends (empty for most events)."""
        kind = event.kind
        if not kind.startswith("tape."):
            return []
        payload = event.payload
        if kind == "tape.agent_loop":
            return self._loop(event, payload)
        run = self._open.get(event.run_id)
        if run is None:
            return []
        if kind == "tape.provider_turn_output":
            return self._chat(run, event, payload)
        if kind == "tape.tool_proposal":
            return self._proposal(run, event, payload)
        if kind == "tape.tool_result":
            return self._tool(run, event, payload)
        return []

    def _loop(self, event: EventLike, payload: Mapping[str, Any]) -> list[SpanRecord]:
        phase = payload.get("phase", "")
        if phase == _STARTED:
            sid, pos = event.session_id, event.position
            self._open[event.run_id] = _Open(
                trace_id=run_trace_id(sid, event.run_id),
                agent_id=derive_id(sid, pos, INVOKE_AGENT, 64),
                start_ms=event.ts_ms, position=pos, session_id=sid)
            if len(self._open) > self._max_open:
                self._open.popitem(last=False)
            return []
        run = self._open.get(event.run_id)
        if run is None:
            return []
        if phase == _TURN_STARTED:
            run.turn_start[int(payload.get("turn", 0))] = (event.position, event.ts_ms)
            return []
        if phase != _TERMINATED:
            return []
        del self._open[event.run_id]
        attributes: dict[str, str | int | bool | tuple[str, ...]] = {
            **self._common(run, event), "palyra.journal.end_position": event.position,
            "palyra.agent.end_reason": str(payload.get("reason", "")),
            "palyra.agent.turns": int(payload.get("turn", 0)),
        }
        if run.provider:
            attributes["gen_ai.provider.name"] = run.provider
        return [SpanRecord(
            name=INVOKE_AGENT, operation=INVOKE_AGENT, trace_id=run.trace_id,
            span_id=run.agent_id, parent_id=None, start_ns=run.start_ms * _NS_PER_MS,
            end_ns=event.ts_ms * _NS_PER_MS, position=run.position,
            attributes={**attributes, "palyra.journal.position": run.position})]

    def _chat(self, run: _Open, event: EventLike, payload: Mapping[str, Any]) -> list[SpanRecord]:
        turn = int(payload.get("turn", 0))
        start_pos, start_ms = run.turn_start.pop(turn, (event.position, event.ts_ms))
        provider = str(payload.get("provider", ""))
        run.provider = provider or run.provider
        attributes: dict[str, str | int | bool | tuple[str, ...]] = {
            **self._common(run, event),
            "gen_ai.provider.name": provider,
            "gen_ai.usage.input_tokens": int(payload.get("inputTokens", 0)),
            "gen_ai.usage.output_tokens": int(payload.get("outputTokens", 0)),
            "gen_ai.response.finish_reasons": (str(payload.get("finishReason", "")),),
            "palyra.journal.start_position": start_pos,
        }
        return [SpanRecord(
            name=f"{CHAT} {provider}".strip(), operation=CHAT, trace_id=run.trace_id,
            span_id=derive_id(run.session_id, event.position, CHAT, 64), parent_id=run.agent_id,
            start_ns=start_ms * _NS_PER_MS, end_ns=event.ts_ms * _NS_PER_MS,
            position=event.position, attributes=attributes)]

    def _proposal(self, run: _Open, event: EventLike,
                  payload: Mapping[str, Any]) -> list[SpanRecord]:
        decision = payload.get("decision") or {}
        call_id = str(payload.get("proposalId", ""))
        tool = str(payload.get("toolName", ""))
        outcome = str(decision.get("outcome", ""))
        run.policy_hash = str(decision.get("policyHash", "")) or run.policy_hash
        if outcome != _DENY:
            run.tools[call_id] = (event.position, event.ts_ms, tool)
        ts = event.ts_ms * _NS_PER_MS
        return [SpanRecord(
            name=APPLY_GUARDRAIL, operation=APPLY_GUARDRAIL, trace_id=run.trace_id,
            span_id=derive_id(run.session_id, event.position, APPLY_GUARDRAIL, 64),
            parent_id=run.agent_id, start_ns=ts, end_ns=ts, position=event.position,
            attributes={
                **self._common(run, event), "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": call_id,
                "palyra.policy.decision": outcome.removeprefix("TOOL_DECISION_OUTCOME_").lower(),
                "palyra.policy.ids": tuple(str(p) for p in decision.get("policyIds", ())),
            },
            error="denied" if outcome == _DENY else "")]

    def _tool(self, run: _Open, event: EventLike, payload: Mapping[str, Any]) -> list[SpanRecord]:
        call_id = str(payload.get("proposalId", ""))
        start_pos, start_ms, tool = run.tools.pop(
            call_id, (event.position, event.ts_ms, str(payload.get("toolName", ""))))
        outcome = tool_outcome(payload)
        return [SpanRecord(
            name=f"{EXECUTE_TOOL} {tool}", operation=EXECUTE_TOOL, trace_id=run.trace_id,
            span_id=derive_id(run.session_id, event.position, EXECUTE_TOOL, 64),
            parent_id=run.agent_id, start_ns=start_ms * _NS_PER_MS,
            end_ns=event.ts_ms * _NS_PER_MS, position=event.position,
            attributes={
                **self._common(run, event), "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": call_id, "palyra.tool.outcome": outcome, "palyra.journal.start_position": start_pos,
            },
            error="" if outcome == "ok" else outcome)]

    @staticmethod
    def _common(run: _Open, event: EventLike) -> dict[str, str | int | bool | tuple[str, ...]]:
        # gen_ai.conversation.id is the session id (GenAI's name for it).
        attributes: dict[str, str | int | bool | tuple[str, ...]] = {
            "gen_ai.conversation.id": run.session_id, "palyra.run.id": event.run_id,
            "palyra.journal.position": event.position,
        }
        if run.policy_hash:
            attributes["palyra.policy.hash"] = run.policy_hash
        return attributes


def tool_outcome(payload: Mapping[str, Any]) -> str:
    """``ok``, ``timeout`` or ``error`` from a ``tool_result`` payload."""
    if payload.get("success"):
        return "ok"
    return "timeout" if payload.get("timedOut") else "error"
