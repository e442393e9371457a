"""Traces rebuilt after the fact: a bundle's events through the same fold as live."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan

from palyra.ops.bundle_events import bundle_events
from palyra.ops.otlp_json import otlp_json
from palyra.ops.spans import SpanFold
from palyra.ops.tracing import resource_for, to_readable


def bundle_spans(path: Path, *, service_name: str = "palyra") -> list[ReadableSpan]:
    """Every span the bundle's events finish, in the order the daemon would emit them."""
    fold, resource = SpanFold(), resource_for(service_name)
    spans: list[ReadableSpan] = []
    for event in bundle_events(path):
        spans.extend(to_readable(record, resource) for record in fold.feed(event))
    return spans


def bundle_otlp_json(path: Path, *, service_name: str = "palyra") -> str:
    """:func:`bundle_spans` as OTLP/JSON."""
    return otlp_json(bundle_spans(path, service_name=service_name))
