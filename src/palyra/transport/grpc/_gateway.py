"""Per-call authentication and the one error translation of the gRPC gateway.

grpclib dispatches ``RecvRequest`` before the service method runs, with the
invocation metadata and a *mutable* ``method_func``. The listener wraps that
function so that, in one place and for every RPC: the caller is authenticated
and published in :data:`palyra.transport.context.current_caller`, and any
exception is translated once to ``GRPCError(status, message)``; the stable
error code then rides in the ``x-palyra-error-code`` trailer, added by the
``SendTrailingMetadata`` listener. Each call's header blocks (initial metadata,
trailers, a trailers-only error) are written without h2's ``send_headers``
where it would only build the one frame (``_headers``), and each of its responses
as one DATA frame without grpclib's generic send where it can be (``_tape``).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import structlog
from grpclib.const import Status
from grpclib.events import RecvRequest, SendTrailingMetadata, listen
from grpclib.exceptions import GRPCError, StreamTerminatedError
from grpclib.server import Server

from palyra.transport.auth import REQUEST_ID_HEADER, Authenticator
from palyra.transport.context import current_caller
from palyra.transport.errors import ERROR_CODE_HEADER, RETRYABLE_HEADER, WireError, to_wire
from palyra.transport.grpc._headers import write_headers_directly
from palyra.transport.grpc._health import HEALTH_PREFIX
from palyra.transport.grpc._tape import send_messages_directly
from palyra.transport.logctx import bind_request
from palyra.transport.streams import OpenStreams, is_streaming_rpc

_log = structlog.get_logger("palyra.grpc")
_wire_error: contextvars.ContextVar[WireError | None] = contextvars.ContextVar(
    "palyra_grpc_wire_error", default=None
)


def install(server: Server, authenticator: Authenticator,
            streams: OpenStreams | None = None) -> None:
    """Attach authentication, log context, error translation and stream counting to ``server``."""

    async def on_request(event: RecvRequest) -> None:
        if event.method_name.startswith(HEALTH_PREFIX):
            return  # the standard health service: public, like /readyz, and raises nothing
        rpc = event.method_name.rsplit("/", 1)[-1]
        headers = {k: v for k, v in event.metadata.items() if isinstance(v, str)}
        counted = streams if streams is not None and is_streaming_rpc(rpc) else None
        event.method_func = cast(Any, _guarded(rpc, headers, event.method_func, authenticator,
                                               counted))

    async def on_trailers(event: SendTrailingMetadata) -> None:
        wire = _wire_error.get()
        if wire is not None and event.status is not Status.OK:
            event.metadata[ERROR_CODE_HEADER] = wire.code.value
            event.metadata[RETRYABLE_HEADER] = "true" if wire.retryable else "false"

    listen(server, RecvRequest, on_request)
    listen(server, SendTrailingMetadata, on_trailers)


def _guarded(
    rpc: str,
    headers: dict[str, str],
    method_func: Callable[[Any], Awaitable[None]],
    authenticator: Authenticator,
    streams: OpenStreams | None = None,
) -> Callable[[Any], Awaitable[None]]:
    async def guarded(stream: Any) -> None:
        started = time.perf_counter()
        write_headers_directly(stream._stream)  # its metadata and trailers (see _headers)
        send_messages_directly(stream)  # its responses, each one DATA frame (see _tape)
        request_id = headers.get(REQUEST_ID_HEADER, "")
        if streams is not None:
            streams.counts["grpc"] += 1
        try:
            caller = authenticator.authenticate(rpc, headers)
            if caller is not None:
                request_id = caller.request_id
            current_caller.set(caller)
            bind_request(request_id, caller, headers)
            await method_func(stream)
        except (GRPCError, asyncio.CancelledError, StreamTerminatedError):
            # grpclib's own statuses (deadline, bad frames), cancellation and a
            # client that reset its stream pass through untouched: grpclib
            # handles each (a reset is logged by it at info, not as an error).
            raise
        except Exception as exc:
            wire = to_wire(exc, request_id=request_id)
            _wire_error.set(wire)
            _log.debug("rpc_error", rpc=rpc, code=wire.code.value, request_id=request_id,
                       ms=round((time.perf_counter() - started) * 1000, 2))
            raise GRPCError(Status(wire.grpc_status), wire.message) from None
        finally:
            if streams is not None:
                streams.counts["grpc"] -= 1
        _log.debug("rpc", rpc=rpc, request_id=request_id,
                   ms=round((time.perf_counter() - started) * 1000, 2))

    return guarded
