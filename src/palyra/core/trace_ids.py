"""Trace and span ids derived from journal data: the same events give the same ids anywhere.

A run is one trace: its id comes from (session id, run id), so the daemon can put
it on every log line of the run before any span exists, and a bundle rebuilds
it. A span's id comes from (session id, journal position, span name): the
position of the event that proves the span happened.
"""

from __future__ import annotations

import hashlib


def derive_id(session_id: str, position: int | str, name: str, bits: int) -> int:
    """A non-zero id of ``bits`` bits from (session, position, name)."""
    digest = hashlib.sha256(f"{session_id}\x00{position}\x00{name}".encode()).digest()
    return int.from_bytes(digest[: bits // 8], "big") or 1  # zero is OpenTelemetry's "invalid"


def run_trace_id(session_id: str, run_id: str) -> int:
    """The 128-bit trace id of a run."""
    return derive_id(session_id, run_id, "trace", 128)


def trace_hex(trace_id: int) -> str:
    """The 32 lowercase hex digits OpenTelemetry (and W3C ``traceparent``) write."""
    return f"{trace_id:032x}"
