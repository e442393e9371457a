"""Counters and histograms folded from committed journal events.

What happened (runs moving, steps, tool calls, decisions, approvals, model
calls, compactions, prunes, incidents, channel admissions, task changes) is
all on the journal, so the metrics are read from there, at scrape time,
instead of being counted on the request path. Latencies come from event
times, through the same span fold the traces use.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from palyra.ops.spans import APPLY_GUARDRAIL, CHAT, EXECUTE_TOOL, EventLike, SpanFold, SpanRecord

# OpenTelemetry GenAI semantic conventions: gen_ai.client.operation.duration (s)
# and gen_ai.client.token.usage bucket boundaries.
GENAI_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24,
                          20.48, 40.96, 81.92)
GENAI_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                       16777216, 67108864)
# Approvals wait on people: seconds to a day.
APPROVAL_WAIT_BUCKETS = (0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 14400, 86400)
_MAX_OPEN_APPROVALS = 100_000  # requests remembered until their answer (oldest dropped)
_NS = 1e9


def _short(enum_text: str, prefix: str) -> str:
    return enum_text.removeprefix(prefix).lower() or "unspecified"


class EventMetrics:
    """The event-derived metrics of one registry; :meth:`feed` one event at a time."""

    def __init__(self, registry: CollectorRegistry, model_of: dict[str, str]) -> None:
        self._model_of = model_of
        self._fold = SpanFold()
        self._asked: OrderedDict[str, int] = OrderedDict()  # approval id → request ts_ms
        r = registry
        self.runs = Counter("palyra_run_transitions", "Runs entering each state.", ["state"],
                            registry=r)
        self.steps = Counter("palyra_steps", "Agent-loop steps (one model turn each).",
                             registry=r)
        self.tool_calls = Counter("palyra_tool_calls", "Tool calls by tool and outcome "
                                  "(ok, error, timeout, denied).", ["tool", "outcome"],
                                  registry=r)
        self.tool_duration = Histogram(
            "palyra_tool_duration_seconds", "Tool execution time, proposal or approval to result.",
            ["tool"], buckets=GENAI_DURATION_BUCKETS, registry=r)
        self.decisions = Counter("palyra_policy_decisions", "Cedar tool.execute decisions.",
                                 ["outcome"], registry=r)
        self.approvals_requested = Counter("palyra_approvals_requested", "Approvals asked for.",
                                           registry=r)
        self.approvals_decided = Counter("palyra_approvals_decided", "Approvals answered.",
                                         ["state"], registry=r)
        self.approval_wait = Histogram("palyra_approval_wait_seconds",
                                       "Request to decision of an approval.",
                                       buckets=APPROVAL_WAIT_BUCKETS, registry=r)
        self.model_duration = Histogram(
            "gen_ai_client_operation_duration_seconds", "GenAI operation duration (model calls).",
            ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model"],
            buckets=GENAI_DURATION_BUCKETS, registry=r)
        self.model_tokens = Histogram(
            "gen_ai_client_token_usage", "Tokens per model call, by type (input, output).",
            ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model",
             "gen_ai_token_type"], buckets=GENAI_TOKEN_BUCKETS, registry=r)
        self.compactions = Counter("palyra_compactions", "Session compactions.", registry=r)
        self.compaction_saved = Counter("palyra_compaction_tokens_saved",
                                        "Estimated provider-input tokens compaction removed.",
                                        registry=r)
        self.prunes = Counter("palyra_retention_prunes", "Retention batches (journal.pruned).",
                              registry=r)
        self.incidents = Counter("palyra_watchdog_incidents", "Watchdog incidents by kind.",
                                 ["kind"], registry=r)
        self.channel = Counter("palyra_channel_messages", "Channel messages by outcome "
                               "(admitted, quarantined, command).", ["channel", "outcome"],
                               registry=r)
        self.tasks = Counter("palyra_task_changes", "Background-task changes by kind and change "
                             "(enqueued, claimed, lease_lapsed = takeover, succeeded, ...).",
                             ["kind", "change"], registry=r)
        self.memory = Counter("palyra_memory_changes", "Memory items ingested, deleted, purged.",
                              ["change"], registry=r)

    def feed(self, event: EventLike) -> None:
        """Count one committed event."""
        kind, payload = event.kind, event.payload
        for span in self._fold.feed(event):
            self._span(span)
        if kind.startswith("tape."):
            self._tape(kind, event, payload)
        elif kind.startswith("task."):
            self.tasks.labels(str(payload.get("kind", "")), kind[5:]).inc()
        elif kind.startswith("channel.message_"):
            self.channel.labels(str(payload.get("channel", "")), kind[16:]).inc()
        elif kind == "channel.command":
            self.channel.labels(str(payload.get("channel", "")), "command").inc()
        elif kind == "watchdog.incident":
            self.incidents.labels(str(payload.get("kind", ""))).inc()
        elif kind == "journal.pruned":
            self.prunes.inc()
        elif kind.startswith("memory."):
            self.memory.labels(kind[7:]).inc()

    def _tape(self, kind: str, event: EventLike, payload: dict[str, Any]) -> None:
        if kind == "tape.status":
            self.runs.labels(_short(str(payload.get("state", "")), "RUN_STATE_")).inc()
        elif kind == "tape.provider_turn_output":
            self.steps.inc()
        elif kind == "tape.tool_approval_request":
            self.approvals_requested.inc()
            self._asked[str(payload.get("approvalId", ""))] = event.ts_ms
            if len(self._asked) > _MAX_OPEN_APPROVALS:
                self._asked.popitem(last=False)
        elif kind == "tape.tool_approval_response":
            self.approvals_decided.labels(
                _short(str(payload.get("state", "")), "APPROVAL_STATE_")).inc()
            asked = self._asked.pop(str(payload.get("approvalId", "")), None)
            if asked is not None:
                self.approval_wait.observe(max(event.ts_ms - asked, 0) / 1000)
        elif kind == "tape.session_compaction":
            self.compactions.inc()
            saved = int(payload.get("tokensBefore", 0)) - int(payload.get("tokensAfter", 0))
            self.compaction_saved.inc(max(saved, 0))

    def _span(self, span: SpanRecord) -> None:
        attributes = span.attributes
        seconds = max(span.end_ns - span.start_ns, 0) / _NS
        if span.operation == CHAT:
            provider = str(attributes.get("gen_ai.provider.name", ""))
            model = self._model_of.get(provider, "")
            self.model_duration.labels(CHAT, provider, model).observe(seconds)
            for token_type in ("input", "output"):
                tokens = attributes.get(f"gen_ai.usage.{token_type}_tokens", 0)
                self.model_tokens.labels(CHAT, provider, model, token_type).observe(
                    tokens if isinstance(tokens, int) else 0)
        elif span.operation == EXECUTE_TOOL:
            tool = str(attributes.get("gen_ai.tool.name", ""))
            self.tool_calls.labels(tool, str(attributes.get("palyra.tool.outcome", ""))).inc()
            self.tool_duration.labels(tool).observe(seconds)
        elif span.operation == APPLY_GUARDRAIL:
            outcome = str(attributes.get("palyra.policy.decision", ""))
            self.decisions.labels(outcome).inc()
            if outcome == "deny":
                self.tool_calls.labels(str(attributes.get("gen_ai.tool.name", "")),
                                       "denied").inc()
