"""A client going away is not a server error (issue 12, item 13).

Each way a vanished peer surfaces in the transports maps to CANCELLED and is
logged at info without a traceback; a real bug still maps to INTERNAL and is
logged as an error with its traceback.
"""

from __future__ import annotations

import pytest
import structlog
from grpclib.exceptions import StreamTerminatedError
from h2.exceptions import StreamClosedError
from uvicorn.protocols.utils import ClientDisconnected

from palyra.core.errors import ErrorCode
from palyra.transport.errors import to_wire


@pytest.mark.parametrize("exc", [ConnectionResetError(104, "reset"), BrokenPipeError(),
                                 ClientDisconnected(), StreamTerminatedError("reset"),
                                 StreamClosedError(3)])
def test_peer_gone_is_cancelled_and_logged_quietly(exc: BaseException) -> None:
    with structlog.testing.capture_logs() as logs:
        wire = to_wire(exc, request_id="r1")
    assert wire.code is ErrorCode.CANCELLED
    assert [(entry["event"], entry["log_level"]) for entry in logs] == [
        ("client_disconnected", "info")]
    assert "exc_info" not in logs[0]


def test_a_bug_is_still_internal_with_a_traceback() -> None:
    with structlog.testing.capture_logs() as logs:
        wire = to_wire(ValueError("boom"), request_id="r2")
    assert wire.code is ErrorCode.INTERNAL
    assert logs[0]["event"] == "unhandled_error" and logs[0]["log_level"] == "error"
    assert "exc_info" in logs[0]
