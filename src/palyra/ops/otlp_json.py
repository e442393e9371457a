"""SDK spans as OTLP/JSON (an ``ExportTraceServiceRequest``), as a collector reads it.

The protobuf request comes from the OTLP exporter's own encoder; only the JSON
mapping is done here, because OTLP/JSON departs from protobuf's canonical JSON
in one place: trace and span ids are hex, not base64.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan

_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId"})


def otlp_document(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """The OTLP/JSON object of ``spans``."""
    message = encode_spans(spans)
    document: dict[str, Any] = json_format.MessageToDict(message, use_integers_for_enums=True)
    _hex_ids(document)
    return document


def otlp_json(spans: Sequence[ReadableSpan]) -> str:
    """:func:`otlp_document` as JSON text, keys sorted (the same spans give the same bytes)."""
    return json.dumps(otlp_document(spans), sort_keys=True, separators=(",", ":"))


def _hex_ids(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_KEYS and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)
