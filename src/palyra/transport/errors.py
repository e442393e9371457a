"""Translate errors for the wire, once, with the spec's mapping table.

``palyra_gen.errors.ERROR_MAPPING`` (generated from ``errors.proto``) gives each
``ErrorCode`` its gRPC status, HTTP status and retryability. Anything that is
not a :class:`PalyraError` is a bug: it is logged with its traceback here and
reaches the client only as ``INTERNAL`` with the request id, never the trace —
except a peer that went away, which is CANCELLED and logged at info.
"""

from __future__ import annotations

import dataclasses

import structlog
from grpclib.exceptions import StreamTerminatedError
from h2.exceptions import StreamClosedError
from palyra_gen.errors import ERROR_MAPPING
from palyra_gen.palyra import v1
from uvicorn.protocols.utils import ClientDisconnected

from palyra.core.errors import ErrorCode, PalyraError

ERROR_CODE_HEADER = "x-palyra-error-code"
RETRYABLE_HEADER = "x-palyra-retryable"

_log = structlog.get_logger("palyra.transport")


@dataclasses.dataclass(frozen=True, slots=True)
class WireError:
    """An error ready for either transport."""

    code: ErrorCode
    message: str
    grpc_status: int
    http_status: int
    retryable: bool
    details: dict[str, str]

    def detail(self) -> v1.ErrorDetail:
        """The spec's ``ErrorDetail`` message (the HTTP error body)."""
        return v1.ErrorDetail(
            code=v1.ErrorCode[self.code.value],
            message=self.message,
            retryable=self.retryable,
            details=dict(self.details),
        )

    def http_body(self) -> dict[str, object]:
        """``{code, message, retryable, details}`` with the short code name."""
        return {
            "code": self.code.value,
            "message": self.message,
            "retryable": self.retryable,
            "details": dict(self.details),
        }


def peer_gone(exc: BaseException) -> bool:
    """True for the ways a client going away surfaces: not a server error."""
    return isinstance(exc, PEER_GONE)


def to_wire(exc: BaseException, *, request_id: str = "") -> WireError:
    """Map any exception to a :class:`WireError`; unexpected ones become INTERNAL.

    A peer that went away (``peer_gone``) is CANCELLED, logged at info without a
    traceback: nobody is left to answer, and it is not the server's fault.
    """
    if isinstance(exc, PalyraError):
        code, message, details = exc.code, exc.message, exc.details
    elif peer_gone(exc):
        _log.info("client_disconnected", request_id=request_id, reason=type(exc).__name__)
        code = ErrorCode.CANCELLED
        message = "the client went away"
        details = {"request_id": request_id} if request_id else {}
    else:
        _log.error("unhandled_error", request_id=request_id, exc_info=exc)
        code = ErrorCode.INTERNAL
        message = "internal error" + (f" (request {request_id})" if request_id else "")
        details = {"request_id": request_id} if request_id else {}
    mapping = ERROR_MAPPING[code.value]
    return WireError(
        code=code,
        message=message,
        grpc_status=int(mapping.grpc_status),
        http_status=int(mapping.http_status),
        retryable=bool(mapping.retryable),
        details=dict(details),
    )


#: How a vanished peer shows up in the transports: a reset or broken socket,
#: uvicorn's ClientDisconnected (an OSError), grpclib's terminated stream and
#: h2's closed stream.
PEER_GONE: tuple[type[BaseException], ...] = (
    ConnectionError, ClientDisconnected, StreamTerminatedError, StreamClosedError)
