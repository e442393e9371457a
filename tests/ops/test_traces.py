"""GenAI spans from a real tool-loop run with approvals: shape, journal positions, rebuild."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from palyra_gen.palyra import v1 as pb

from palyra.app import PalyraApp
from palyra.cli.main import main as palyra_main
from palyra.journal import JournalStore, export_bundle
from palyra.ops.otlp_json import otlp_json
from palyra.ops.rebuild import bundle_spans
from palyra.ops.spans import SpanFold
from palyra.ops.trace_follower import StoreFollower
from palyra.ops.tracing import SpanSink, resource_for

from .helpers import run_with_approvals

# The event kind each span's ``palyra.journal.position`` must point at.
_DESCRIBED = {"invoke_agent": "tape.agent_loop", "chat": "tape.provider_turn_output",
              "execute_tool": "tape.tool_result", "apply_guardrail": "tape.tool_proposal"}


async def _traced_run(app: PalyraApp, store: JournalStore, steps: int) -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    sink = SpanSink(SimpleSpanProcessor(exporter))
    follower = StoreFollower(store, sink, store.head().count)
    run = await run_with_approvals(app, steps)
    assert run.state == pb.RunState.DONE
    assert follower.poll() > 0
    return list(exporter.get_finished_spans())


async def test_spans_have_the_genai_shape_and_point_at_their_events(
        app: tuple[PalyraApp, JournalStore]) -> None:
    palyra, store = app
    spans = await _traced_run(palyra, store, steps=2)
    by_op: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        by_op.setdefault(str(span.attributes["gen_ai.operation.name"]), []).append(span)
    assert {op: len(v) for op, v in by_op.items()} == {
        "invoke_agent": 1, "chat": 3, "execute_tool": 2, "apply_guardrail": 2}
    (root,) = by_op["invoke_agent"]
    assert root.parent is None and root.context is not None
    events = {e.position: e for e in store.read_range(0, 1000)}
    for span in spans:
        assert span.context is not None and span.context.trace_id == root.context.trace_id
        if span is not root:
            assert span.parent is not None and span.parent.span_id == root.context.span_id
        attributes = span.attributes
        event = events[int(attributes["palyra.journal.position"])]
        assert event.kind == _DESCRIBED[str(attributes["gen_ai.operation.name"])]
        assert attributes["palyra.run.id"] == event.run_id
        assert attributes["gen_ai.conversation.id"] == event.session_id
        assert span.start_time is not None and span.end_time is not None
        assert span.start_time <= span.end_time
    for span in by_op["apply_guardrail"] + by_op["execute_tool"]:
        assert span.attributes["gen_ai.tool.name"] == "add"
        policy_hash = span.attributes["palyra.policy.hash"]
        assert isinstance(policy_hash, str) and len(policy_hash) == 64
        assert span.attributes.get("palyra.policy.decision", "needs_approval") == "needs_approval"
    tokens = sum(int(s.attributes["gen_ai.usage.input_tokens"]) for s in by_op["chat"])
    assert tokens == sum(int(e.payload.get("inputTokens", 0)) for e in events.values()
                         if e.kind == "tape.provider_turn_output")


async def test_traces_rebuilt_from_a_bundle_equal_the_live_ones(
        app: tuple[PalyraApp, JournalStore], tmp_path: Path,
        capsys: object) -> None:
    palyra, store = app
    live = await _traced_run(palyra, store, steps=3)
    bundle = tmp_path / "journal.bundle"
    export_bundle(store, bundle)
    rebuilt = bundle_spans(bundle)
    assert otlp_json(rebuilt) == otlp_json(live)
    out = tmp_path / "traces.json"
    assert palyra_main(["journal", "traces", "--bundle", str(bundle), "--out", str(out)]) == 0
    document = json.loads(out.read_text())
    names = [s["name"] for rs in document["resourceSpans"] for ss in rs["scopeSpans"]
             for s in ss["spans"]]
    assert sorted(names) == sorted(s.name for s in live)
    first = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(first["traceId"]) == 32 and len(first["spanId"]) == 16  # OTLP/JSON: hex ids


def test_ids_depend_on_session_and_position_only() -> None:
    class Ev:
        def __init__(self, position: int, kind: str, payload: dict[str, object]) -> None:
            self.position, self.kind, self.payload = position, kind, payload
            self.session_id, self.run_id, self.ts_ms = "s1", "r1", 1000 + position

    def fold() -> list[int]:
        f = SpanFold()
        out = []
        for ev in (Ev(7, "tape.agent_loop", {"phase": "AGENT_LOOP_PHASE_STARTED"}),
                   Ev(9, "tape.agent_loop", {"phase": "AGENT_LOOP_PHASE_TERMINATED"})):
            out += [s.trace_id for s in f.feed(ev)]
        return out

    assert fold() == fold() and fold()[0] != 0


@pytest.mark.parametrize("ratio", [0.0, 0.5, 1.0])
def test_sampling_follows_the_sdk_ratio_rule_per_trace(ratio: float) -> None:
    from opentelemetry.sdk.trace.sampling import Decision, TraceIdRatioBased

    from palyra.ops.spans import SpanRecord

    records = [SpanRecord(name="chat", operation="chat", trace_id=(i * 0x9E3779B97F4A7C15) %
                          (1 << 128) or 1, span_id=i + 1, parent_id=None, start_ns=0, end_ns=1,
                          position=i, attributes={}) for i in range(400)]
    exporter = InMemorySpanExporter()
    SpanSink(SimpleSpanProcessor(exporter), sample_ratio=ratio).emit(records)
    oracle = TraceIdRatioBased(ratio)
    kept = {r.trace_id for r in records
            if oracle.should_sample(None, r.trace_id, r.name).decision
            is Decision.RECORD_AND_SAMPLE}
    got = {s.context.trace_id for s in exporter.get_finished_spans() if s.context is not None}
    assert got == kept
    assert (len(kept) == 0) if ratio == 0 else (len(kept) == 400) if ratio == 1 else \
        (100 < len(kept) < 300)


def test_the_resource_hashes_and_compares_as_the_sdks_own() -> None:
    # Its hash is computed once (the OTLP encoder hashes it per span); it must stay the
    # SDK's, or spans of one resource would be grouped apart from an equal one.
    ours = resource_for("palyra-test")
    sdks = Resource(ours.attributes, ours.schema_url)
    assert ours == sdks and hash(ours) == hash(sdks)
    assert ours.attributes["service.name"] == "palyra-test"
    other = resource_for("another")
    assert ours != other and hash(ours) != hash(other)
    assert len({ours: 1, sdks: 2}) == 1


def test_a_burst_larger_than_the_batch_queue_loses_no_span() -> None:
    # The exporter reads the journal page by page as fast as it can (catching up, or its
    # last read to the head at shutdown); the SDK's batch processor drops what its queue
    # cannot hold. The sink must hold the reading back instead, with the SDK's own flush.
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from palyra.ops.spans import SpanRecord

    records = [SpanRecord(name="chat", operation="chat", trace_id=i + 1, span_id=i + 1,
                          parent_id=None, start_ns=0, end_ns=1, position=i, attributes={})
               for i in range(600)]
    exporter = InMemorySpanExporter()
    # A long delay: the worker exports a full batch only, so the queue fills at once.
    processor = BatchSpanProcessor(exporter, max_queue_size=64, max_export_batch_size=16,
                                   schedule_delay_millis=60_000)
    sink = SpanSink(processor, queue_size=64)
    for page in range(0, 600, 100):
        sink.emit(records[page:page + 100])
    sink.shutdown()
    assert sorted(s.context.span_id for s in exporter.get_finished_spans()
                  if s.context is not None) == list(range(1, 601))
