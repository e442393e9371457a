"""Counters and histograms folded from committed journal events.

What happened (runs moving, steps, tool calls, decisions, approvals, model
calls, compactions, prunes, incidents, channel messages, task changes) is all
on the journal, so the metrics are read from there at scrape time instead of
being counted on the request path. The fold is plain dict arithmetic (one
dispatch and an addition or a bisect per event); the Prometheus families are
built only when scraped. Durations come from event times: a model call from
its turn's start to its ``provider_turn_output``, a tool call from its
proposal (or approval) to its result, an approval wait from request to answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from palyra.core.histogram import Histogram
from palyra.ops.spans import EventLike, tool_outcome

if TYPE_CHECKING:
    from prometheus_client.core import Metric

# OpenTelemetry GenAI semantic conventions: gen_ai.client.operation.duration (s)
# and gen_ai.client.token.usage bucket boundaries.
GENAI_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24,
                          20.48, 40.96, 81.92)
GENAI_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                       16777216, 67108864)
# Approvals wait on people: seconds to a day.
APPROVAL_WAIT_BUCKETS = (0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 14400, 86400)
_MAX_OPEN = 100_000  # starts remembered until their end (oldest dropped: memory stays bounded)
_MAX_KINDS = 1_000  # event kinds whose handler is remembered (the spec has a few dozen)
_OUTCOMES = ("ok", "error", "timeout")  # what tool_outcome answers
_MODEL = ("gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model")


@dataclass(frozen=True, slots=True)
class Family:
    """One exposed metric: its name (counters without ``_total``), help and labels."""

    name: str
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()  # set for a histogram


RUNS = Family("palyra_run_transitions", "Runs entering each state.", ("state",))
STEPS = Family("palyra_steps", "Agent-loop steps (one model turn each).")
TOOL_CALLS = Family("palyra_tool_calls", "Tool calls by tool and outcome (ok, error, timeout, "
                    "denied).", ("tool", "outcome"))
TOOL_SECONDS = Family("palyra_tool_duration_seconds", "Tool execution, proposal or approval to "
                      "result.", ("tool",), GENAI_DURATION_BUCKETS)
DECISIONS = Family("palyra_policy_decisions", "Cedar tool.execute decisions.", ("outcome",))
ASKED = Family("palyra_approvals_requested", "Approvals asked for.")
DECIDED = Family("palyra_approvals_decided", "Approvals answered, by final state.", ("state",))
WAITED = Family("palyra_approval_wait_seconds", "Request to answer of an approval.", (),
                APPROVAL_WAIT_BUCKETS)
MODEL_SECONDS = Family("gen_ai_client_operation_duration_seconds", "GenAI operation duration "
                       "(model calls).", _MODEL, GENAI_DURATION_BUCKETS)
MODEL_TOKENS = Family("gen_ai_client_token_usage", "Tokens per model call, by type (input, "
                      "output).", (*_MODEL, "gen_ai_token_type"), GENAI_TOKEN_BUCKETS)
COMPACTIONS = Family("palyra_compactions", "Session compactions.")
SAVED = Family("palyra_compaction_tokens_saved", "Provider-input tokens compaction removed "
               "(estimated).")
PRUNES = Family("palyra_retention_prunes", "Retention batches (journal.pruned events).")
INCIDENTS = Family("palyra_watchdog_incidents", "Watchdog incidents by kind.", ("kind",))
CHANNEL = Family("palyra_channel_messages", "Channel messages by channel and outcome "
                 "(admitted, quarantined, command).", ("channel", "outcome"))
TASKS = Family("palyra_task_changes", "Background-task changes by task kind and change "
               "(enqueued, claimed, lease_lapsed = a takeover, succeeded, failed, ...).",
               ("kind", "change"))
MEMORY = Family("palyra_memory_changes", "Memory items ingested, deleted, purged.", ("change",))
FAMILIES = (RUNS, STEPS, TOOL_CALLS, TOOL_SECONDS, DECISIONS, ASKED, DECIDED, WAITED,
            MODEL_SECONDS, MODEL_TOKENS, COMPACTIONS, SAVED, PRUNES, INCIDENTS, CHANNEL, TASKS,
            MEMORY)

Key = tuple[str, ...]


def _short(enum_text: Any, prefix: str) -> str:
    return str(enum_text).removeprefix(prefix).lower() or "unspecified"


def _ignore(event: EventLike, payload: dict[str, Any]) -> None:
    """What a kind the metrics do not count does."""


def _bounded(memory: dict[Any, Any], key: Any, value: Any) -> None:
    memory[key] = value
    if len(memory) > _MAX_OPEN:
        del memory[next(iter(memory))]  # the oldest (dicts keep insertion order)


class _Cell:
    """One counter's value; handlers keep a reference to it, so a count is one addition."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0


class EventMetrics:
    """The event-derived metrics; :meth:`feed` one event at a time, :meth:`collect` to expose.

    The fold runs on the daemon's loop for every committed event, so its handlers
    keep direct references to the counter cells and histograms of the label values
    they saw before (one dict lookup, then an addition or a bisect), and remember
    open model turns, tool calls and approvals in plain bounded dicts.
    """

    def __init__(self, model_of: dict[str, str]) -> None:
        self._model_of = model_of
        self._counts: dict[Family, dict[Key, _Cell]] = {f: {} for f in FAMILIES if not f.buckets}
        self._hists: dict[Family, dict[Key, Histogram]] = {f: {} for f in FAMILIES if f.buckets}
        self._turns: dict[str, int] = {}  # run → its open model turn's start (one at a time)
        self._tools: dict[str, tuple[int, str]] = {}  # call → (ts, tool)
        self._asked: dict[str, int] = {}  # approval → ts
        for family in self._counts:
            if not family.labels:  # an unlabelled counter exists from the start, at 0
                self._cell(family, ())
        self._steps = self._cell(STEPS, ())
        self._model_children: dict[str, tuple[Histogram, Histogram, Histogram]] = {}
        self._tool_children: dict[str, tuple[dict[str, _Cell], Histogram]] = {}
        self._outcomes: dict[str, tuple[str, _Cell]] = {}  # decision enum → (short, cell)
        self._states: dict[Any, _Cell] = {}  # run state enum → its transitions' cell
        self._on: dict[str, Callable[[EventLike, dict[str, Any]], None]] = {
            "tape.status": self._status, "tape.agent_loop": self._loop,
            "tape.provider_turn_output": self._model, "tape.tool_proposal": self._proposal,
            "tape.tool_approval_request": self._asked_for,
            "tape.tool_approval_response": self._answered, "tape.tool_result": self._result,
            "tape.session_compaction": self._compaction, "watchdog.incident": self._incident,
            "journal.pruned": lambda e, p: self._inc(PRUNES, ()),
            "channel.message_admitted": self._channel, "channel.message_quarantined":
                self._channel, "channel.command": self._channel,
        }

    def count(self, family: Family, *labels: str) -> float:
        """A counter's value (for tests and the bench)."""
        cell = self._counts[family].get(labels)
        return cell.value if cell is not None else 0.0

    def quarantined(self) -> dict[str, float]:
        """Messages quarantined since the fold began, per channel."""
        return {labels[0]: cell.value for labels, cell in self._counts[CHANNEL].items()
                if labels[1] == "quarantined"}

    def feed(self, event: EventLike) -> None:
        """Count one committed event: one dict lookup picks what its kind does."""
        handler = self._on.get(event.kind)
        if handler is None:
            handler = self._handler_for(event.kind)
        handler(event, event.payload)

    def feed_all(self, events: Iterable[EventLike], failed: Callable[[EventLike], None]) -> None:
        """:meth:`feed` each event (one commit's, on the committing thread): the same
        dispatch without a call per event; an event whose handler raises is passed to
        ``failed`` and the rest still count."""
        on = self._on
        for event in events:
            try:
                handler = on.get(event.kind)
                if handler is None:
                    handler = self._handler_for(event.kind)
                handler(event, event.payload)
            except Exception:
                failed(event)

    def _handler_for(self, kind: str) -> Callable[[EventLike, dict[str, Any]], None]:
        """What a kind with no handler yet does, remembered for its next event (the
        kinds are the spec's, a few dozen; past ``_MAX_KINDS`` nothing more is kept)."""
        if kind == "task.enqueued":

            def handler(event: EventLike, payload: dict[str, Any]) -> None:
                task_kind = str(payload.get("kind", ""))
                self._inc(TASKS, (task_kind, "enqueued"))
                if payload.get("state") == "running":  # born claimed: both moves, one event
                    self._inc(TASKS, (task_kind, "claimed"))
        elif kind.startswith("task."):
            change = kind[5:]

            def handler(event: EventLike, payload: dict[str, Any]) -> None:
                self._inc(TASKS, (str(payload.get("kind", "")), change))
        elif kind.startswith("memory."):
            cell = self._cell(MEMORY, (kind[7:],))

            def handler(event: EventLike, payload: dict[str, Any]) -> None:
                cell.value += 1
        else:
            handler = _ignore
        if len(self._on) < _MAX_KINDS:
            self._on[kind] = handler
        return handler

    def collect(self) -> Iterator[Metric]:
        """The Prometheus families, from the dicts as they stand (a scrape's)."""
        # At a scrape, not at import: the fold needs no prometheus_client (metrics.py).
        from prometheus_client.core import (
            CounterMetricFamily,
            HistogramMetricFamily,
        )

        for family, cells in self._counts.items():
            counter = CounterMetricFamily(family.name, family.help, labels=family.labels)
            for labels, cell in sorted(cells.items()):
                counter.add_metric(labels, cell.value)
            yield counter
        for family, hists in self._hists.items():
            histogram = HistogramMetricFamily(family.name, family.help, labels=family.labels)
            if not family.labels and () not in hists:
                hists = {(): Histogram(family.buckets)}
            for labels, hist in sorted(hists.items()):
                histogram.add_metric(list(labels), cumulative_buckets(hist),
                                     sum_value=hist.sum)
            yield histogram

    # -- the fold ----------------------------------------------------------
    def _cell(self, family: Family, labels: Key) -> _Cell:
        cells = self._counts[family]
        cell = cells.get(labels)
        if cell is None:
            cell = cells[labels] = _Cell()
        return cell

    def _inc(self, family: Family, labels: Key, by: float = 1.0) -> None:
        self._cell(family, labels).value += by

    def _hist(self, family: Family, labels: Key) -> Histogram:
        hists = self._hists[family]
        hist = hists.get(labels)
        if hist is None:
            hist = hists[labels] = Histogram(family.buckets)
        return hist

    def _status(self, event: EventLike, payload: dict[str, Any]) -> None:
        enum_text = payload.get("state", "")
        cell = self._states.get(enum_text)
        if cell is None:
            cell = self._states[enum_text] = self._cell(RUNS, (_short(enum_text, "RUN_STATE_"),))
        cell.value += 1

    def _loop(self, event: EventLike, payload: dict[str, Any]) -> None:
        if payload.get("phase") == "AGENT_LOOP_PHASE_TURN_STARTED":
            _bounded(self._turns, event.run_id, event.ts_ms)

    def _model(self, event: EventLike, payload: dict[str, Any]) -> None:
        self._steps.value += 1
        provider = payload.get("provider", "")
        children = self._model_children.get(provider)
        if children is None:
            labels = ("chat", str(provider), self._model_of.get(provider, ""))
            children = self._model_children[provider] = (
                self._hist(MODEL_SECONDS, labels), self._hist(MODEL_TOKENS, (*labels, "input")),
                self._hist(MODEL_TOKENS, (*labels, "output")))
        ts = event.ts_ms
        children[0].observe(max(ts - self._turns.pop(event.run_id, ts), 0) / 1000)
        children[1].observe(int(payload.get("inputTokens", 0)))
        children[2].observe(int(payload.get("outputTokens", 0)))

    def _proposal(self, event: EventLike, payload: dict[str, Any]) -> None:
        decision = payload.get("decision") or {}
        enum_text = decision.get("outcome", "")
        known = self._outcomes.get(enum_text)
        if known is None:
            outcome = _short(enum_text, "TOOL_DECISION_OUTCOME_")
            known = self._outcomes[enum_text] = (outcome, self._cell(DECISIONS, (outcome,)))
        known[1].value += 1
        tool = str(payload.get("toolName", ""))
        if known[0] == "deny":
            self._inc(TOOL_CALLS, (tool, "denied"))
        else:
            _bounded(self._tools, str(payload.get("proposalId", "")), (event.ts_ms, tool))

    def _asked_for(self, event: EventLike, payload: dict[str, Any]) -> None:
        self._inc(ASKED, ())
        _bounded(self._asked, str(payload.get("approvalId", "")), event.ts_ms)

    def _answered(self, event: EventLike, payload: dict[str, Any]) -> None:
        self._inc(DECIDED, (_short(payload.get("state", ""), "APPROVAL_STATE_"),))
        asked = self._asked.pop(str(payload.get("approvalId", "")), None)
        if asked is not None:
            self._hist(WAITED, ()).observe(max(event.ts_ms - asked, 0) / 1000)
        call = self._tools.get(str(payload.get("proposalId", "")))
        if call is not None:  # the tool runs from its approval on
            self._tools[str(payload.get("proposalId", ""))] = (event.ts_ms, call[1])

    def _result(self, event: EventLike, payload: dict[str, Any]) -> None:
        ts = event.ts_ms
        call = self._tools.pop(payload.get("proposalId", ""), None)
        began, tool = call if call is not None else (ts, str(payload.get("toolName", "")))
        children = self._tool_children.get(tool)
        if children is None:
            children = self._tool_children[tool] = (
                {outcome: self._cell(TOOL_CALLS, (tool, outcome)) for outcome in _OUTCOMES},
                self._hist(TOOL_SECONDS, (tool,)))
        children[0][tool_outcome(payload)].value += 1
        children[1].observe(max(ts - began, 0) / 1000)

    def _compaction(self, event: EventLike, payload: dict[str, Any]) -> None:
        self._inc(COMPACTIONS, ())
        saved = int(payload.get("tokensBefore", 0)) - int(payload.get("tokensAfter", 0))
        self._inc(SAVED, (), max(saved, 0))

    def _incident(self, event: EventLike, payload: dict[str, Any]) -> None:
        self._inc(INCIDENTS, (str(payload.get("kind", "")),))

    def _channel(self, event: EventLike, payload: dict[str, Any]) -> None:
        outcome = event.kind.removeprefix("channel.").removeprefix("message_")
        self._inc(CHANNEL, (str(payload.get("channel", "")), outcome))


def cumulative_buckets(hist: Histogram) -> list[tuple[str, float]]:
    """A histogram's counts as Prometheus' cumulative ``le`` buckets (+Inf last)."""
    running, buckets = 0, []
    for bound, count in zip((*map(str, hist.bounds), "+Inf"), hist.counts, strict=True):
        running += count
        buckets.append((bound, float(running)))
    return buckets
