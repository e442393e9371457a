"""The log context of one request: request id, principal and trace id on every line.

Bound with structlog's contextvars in the task serving the request, so every
line logged while serving it (structlog's or the stdlib's, see
``palyra.daemon.logs``) carries them; tasks the request starts (a run's actor)
inherit them, and the engine adds the session and run ids it serves.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import structlog

from palyra.core.trace_ids import derive_id, trace_hex
from palyra.transport.auth import Caller

# W3C trace context: version-traceid-parentid-flags, lowercase hex.
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")


def request_trace_id(request_id: str, headers: Mapping[str, str]) -> str:
    """The caller's ``traceparent`` trace id, else one derived from the request id."""
    found = _TRACEPARENT.match(headers.get("traceparent", ""))
    if found is not None and found.group(1) != "0" * 32:
        return found.group(1)
    return trace_hex(derive_id("request", request_id, "trace", 128)) if request_id else ""


def bind_request(request_id: str, caller: Caller | None, headers: Mapping[str, str]) -> None:
    """Bind this request's fields for every log line of the current task (and its children)."""
    structlog.contextvars.bind_contextvars(
        request_id=request_id, principal=caller.principal if caller is not None else "",
        trace_id=request_trace_id(request_id, headers))
