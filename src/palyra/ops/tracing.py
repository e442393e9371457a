"""Span records → OpenTelemetry SDK spans, sampled and handed to an SDK span processor.

The spans are not timed live by a tracer: they are folded from committed events
(:mod:`palyra.ops.spans`), so their ids are the deterministic ones and their
times are the journal's. This module only turns them into the SDK's
``ReadableSpan`` and gives them to a processor: ``BatchSpanProcessor`` over the
OTLP/HTTP exporter in the exporter process (:mod:`palyra.ops.trace_exporter`),
any exporter (the in-memory one in tests).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from palyra.ops.config import TracingConfig
from palyra.ops.spans import CHAT, SpanRecord

SCOPE = InstrumentationScope("palyra.journal", "1")
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_KINDS = {CHAT: SpanKind.CLIENT}
_MAX_PARENTS = 4096
_UNSET = Status(StatusCode.UNSET)
QUEUE_SIZE = 2048  # the batch processor's queue (the SDK's default), in spans


class _HashedResource(Resource):
    """A ``Resource`` whose hash is computed once.

    The OTLP encoder groups a batch's spans by resource, hashing it once per
    span, and the SDK's ``Resource.__hash__`` serializes the attributes to
    sorted JSON each time (about 10 µs: a tenth of the exporter's CPU). A
    resource never changes after it is made, so its hash cannot either.
    """

    def __init__(self, resource: Resource) -> None:
        super().__init__(resource.attributes, resource.schema_url)
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash


def resource_for(service_name: str) -> Resource:
    """The ``Resource`` every span of this daemon (or bundle) carries."""
    return _HashedResource(Resource.create({"service.name": service_name}))


def to_readable(record: SpanRecord, resource: Resource,
                parents: dict[tuple[int, int], SpanContext] | None = None) -> ReadableSpan:
    """The SDK span of a record (sampled flag set: only kept spans are built).

    ``parents`` caches parent contexts: a run's spans share one parent.
    """
    context = SpanContext(record.trace_id, record.span_id, is_remote=False, trace_flags=_SAMPLED)
    parent = None
    if record.parent_id is not None:
        key = (record.trace_id, record.parent_id)
        parent = parents.get(key) if parents is not None else None
        if parent is None:
            parent = SpanContext(record.trace_id, record.parent_id, is_remote=False,
                                 trace_flags=_SAMPLED)
            if parents is not None:
                if len(parents) >= _MAX_PARENTS:
                    parents.clear()
                parents[key] = parent
    attributes = {"gen_ai.operation.name": record.operation, **record.attributes}
    status = Status(StatusCode.ERROR, record.error) if record.error else _UNSET
    return ReadableSpan(
        name=record.name, context=context, parent=parent, resource=resource,
        attributes=attributes, kind=_KINDS.get(record.operation, SpanKind.INTERNAL),
        status=status, start_time=record.start_ns, end_time=record.end_ns,
        instrumentation_scope=SCOPE)


class SpanSink:
    """Samples records by trace id and gives the kept ones to ``processor``.

    With ``queue_size`` (a batch processor's queue), it flushes the processor each time
    it has handed it half that many spans: the SDK's batch processor drops the spans its
    queue cannot hold, and the follower reads the journal as fast as it can when it
    catches up (after a burst, and in its last read to the head). The flush makes the
    reading wait for the exporter instead; the journal, not the queue, is the buffer.
    """

    def __init__(self, processor: SpanProcessor, *, sample_ratio: float = 1.0,
                 service_name: str = "palyra", queue_size: int = 0) -> None:
        self._processor = processor
        self._flush_every = max(queue_size // 2, 1) if queue_size else 0
        self._unflushed = 0
        # The SDK's TraceIdRatioBased rule (low 64 bits of the trace id under its
        # bound), applied without building a SamplingResult per span.
        sampler = TraceIdRatioBased(sample_ratio)
        self._limit, self._bound = sampler.TRACE_ID_LIMIT, sampler.bound
        self._resource = resource_for(service_name)
        self._parents: dict[tuple[int, int], SpanContext] = {}
        self.emitted = 0

    def emit(self, records: Iterable[SpanRecord]) -> None:
        """Hand every sampled record to the processor."""
        limit, bound, on_end = self._limit, self._bound, self._processor.on_end
        for record in records:
            if record.trace_id & limit < bound:
                on_end(to_readable(record, self._resource, self._parents))
                self.emitted += 1
                self._unflushed += 1
                if self._unflushed == self._flush_every:
                    self._processor.force_flush()
                    self._unflushed = 0

    def shutdown(self) -> None:
        """Flush and stop the processor (its exporter sends what is queued)."""
        self._processor.shutdown()


def otlp_sink(config: TracingConfig) -> SpanSink:
    """The daemon's sink: batches to the OTLP/HTTP exporter, or to nowhere without an endpoint."""
    exporter: SpanExporter
    if config.otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=config.otlp_endpoint,
                                    timeout=config.export_timeout_s)
    else:
        exporter = _Discard()
    return SpanSink(BatchSpanProcessor(exporter, max_queue_size=QUEUE_SIZE),
                    sample_ratio=config.sample_ratio, service_name=config.service_name,
                    queue_size=QUEUE_SIZE)


class _Discard(SpanExporter):
    """Tracing on with no endpoint: spans are built and batched, then dropped."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None
