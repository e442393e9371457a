"""The gRPC port while the daemon starts: a prompt, standard answer, not the backlog.

Like the HTTP port (:mod:`palyra.daemon.starting`), the gRPC listener is bound
before anything else, but its gateway needs the application. Until then
:class:`StartupGrpcResponder` runs a grpclib server of its own on a thread
with its own event loop (opening the journal and recovering may hold the
daemon's loop), accepting on a duplicate of the listening socket:

* ``grpc.health.v1.Health/Check``: NOT_SERVING, for ``""`` and every palyra
  service (another name is NOT_FOUND, as later);
* ``Health/Watch``: NOT_SERVING; when start-up ends the call ends UNAVAILABLE,
  which standard clients answer by watching again, and the real gateway then
  answers SERVING;
* ``GetHealth``: ``ready: false`` with the ``recovery`` check naming the
  phase, as ``/healthz`` answers;
* every other RPC of the spec: UNAVAILABLE (retryable, the
  ``x-palyra-error-code`` trailer) naming the phase; a method the spec does
  not have is UNIMPLEMENTED, as it will be later.

:meth:`StartupGrpcResponder.stop` refuses new streams (REFUSED_STREAM: never
processed, so clients retry them), ends the watches, stops accepting (only the
duplicate socket is closed: connections arriving later wait in the backlog for
the real gateway) and sends each connection a GOAWAY before closing it, so
clients reconnect to the real gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import weakref
from collections.abc import Callable
from typing import Any

from grpclib.const import Cardinality, Handler, Status
from grpclib.exceptions import GRPCError
from grpclib.health.v1.health_grpc import HealthBase
from grpclib.health.v1.health_pb2 import HealthCheckRequest, HealthCheckResponse
from grpclib.protocol import AbstractHandler, H2Protocol
from grpclib.protocol import Stream as H2Stream
from grpclib.server import Server, Stream
from h2.errors import ErrorCodes
from palyra_gen.palyra import v1
from palyra_gen.services import RPCS

from palyra.core.errors import ErrorCode, PalyraError
from palyra.transport.errors import ERROR_CODE_HEADER, RETRYABLE_HEADER, to_wire
from palyra.transport.grpc import CappedProtoCodec

GET_HEALTH = "/palyra.v1.GatewayService/GetHealth"
SERVICES = frozenset({"", *(rpc.service for rpc in RPCS)})  # what Health knows
WATCH_DRAIN_S = 1.0  # how long stop() lets the watches end before closing connections
CLOSE_S = 2.0  # and how long it waits for the rest of the server to close
_CARDINALITY = {(c.client_streaming, c.server_streaming): c for c in Cardinality}


def starting_status(phase: str) -> tuple[Status, str, dict[str, str]]:
    """The status, message and trailers of an RPC refused in start-up ``phase``."""
    wire = to_wire(PalyraError(f"the daemon is starting: {phase}; retry shortly",
                               code=ErrorCode.UNAVAILABLE, details={"phase": phase}))
    return (Status(wire.grpc_status), wire.message,
            {ERROR_CODE_HEADER: wire.code.value,
             RETRYABLE_HEADER: "true" if wire.retryable else "false"})


def starting_health(phase: str, service: str, version: str) -> v1.GetHealthResponse:
    """``GetHealth``'s answer in start-up ``phase`` (the same as ``/healthz``'s)."""
    return v1.GetHealthResponse(service=service, version=version, ready=False, checks=[
        v1.HealthCheck(name="recovery", ok=False, detail=f"the daemon is starting: {phase}")])


class _StartingHealth(HealthBase):
    """``grpc.health.v1.Health`` while starting: NOT_SERVING until ``finished`` is set."""

    def __init__(self, finished: asyncio.Event) -> None:
        self._finished = finished
        self.watching: set[asyncio.Task[Any]] = set()

    async def Check(self, stream: Stream[HealthCheckRequest, HealthCheckResponse]) -> None:
        request = await stream.recv_message()
        if request is None or request.service not in SERVICES:
            raise GRPCError(Status.NOT_FOUND, "unknown service")
        await stream.send_message(HealthCheckResponse(status=HealthCheckResponse.NOT_SERVING))

    async def Watch(self, stream: Stream[HealthCheckRequest, HealthCheckResponse]) -> None:
        request = await stream.recv_message()
        known = request is not None and request.service in SERVICES
        await stream.send_message(HealthCheckResponse(
            status=HealthCheckResponse.NOT_SERVING if known
            else HealthCheckResponse.SERVICE_UNKNOWN))
        task = asyncio.current_task()
        assert task is not None
        self.watching.add(task)
        try:
            await self._finished.wait()
        finally:
            self.watching.discard(task)
        raise GRPCError(Status.UNAVAILABLE, "the daemon finished starting: watch again")


class _StartingRpcs:
    """Every RPC of the spec: ``GetHealth`` answers not ready, the others UNAVAILABLE."""

    def __init__(self, phase: Callable[[], str], service: str, version: str) -> None:
        self._phase = phase
        self._service = service
        self._version = version

    def __mapping__(self) -> dict[str, Handler]:
        mapping = {}
        for rpc in RPCS:
            path = f"/{rpc.service}/{rpc.method}"
            mapping[path] = Handler(
                self._get_health if path == GET_HEALTH else self._refuse,
                _CARDINALITY[rpc.client_streaming, rpc.server_streaming],
                getattr(v1, rpc.request_type.rsplit(".", 1)[1]),
                getattr(v1, rpc.response_type.rsplit(".", 1)[1]))
        return mapping

    async def _get_health(self, stream: Stream[Any, Any]) -> None:
        await stream.recv_message()
        await stream.send_message(starting_health(self._phase(), self._service, self._version))

    async def _refuse(self, stream: Stream[Any, Any]) -> None:
        # The request is not read: the answer does not depend on it, and a streaming
        # client may never half-close. A trailers-only answer, then the stream is reset.
        status, message, trailers = starting_status(self._phase())
        await stream.send_trailing_metadata(status=status, status_message=message,
                                            metadata=trailers)


class _RefusingHandler(AbstractHandler):
    """grpclib's connection handler, refusing new streams once start-up has finished.

    A stream opened between the watches' end and the GOAWAY would otherwise be
    cut by the close; REFUSED_STREAM tells the client it was never processed,
    which gRPC clients retry on a new connection (the real gateway's).
    """

    def __init__(self, inner: AbstractHandler, refusing: Callable[[], bool]) -> None:
        self._inner = inner
        self._refusing = refusing

    def accept(self, stream: H2Stream, headers: Any, release_stream: Callable[[], None]) -> None:
        if self._refusing():
            stream.reset_nowait(ErrorCodes.REFUSED_STREAM)
            release_stream()
            return
        self._inner.accept(stream, headers, release_stream)

    def cancel(self, stream: H2Stream) -> None:
        self._inner.cancel(stream)

    def close(self) -> None:
        self._inner.close()


class _TrackedServer(Server):
    """grpclib's ``Server``, remembering its connections (to send each a GOAWAY) and
    refusing new streams once :attr:`refusing` is set."""

    def __init__(self, handlers: list[Any], codec: CappedProtoCodec) -> None:
        super().__init__(handlers, codec=codec)
        # Weak: a closed connection's protocol goes with it, so however many clients
        # come and go during a long start-up, this holds only the open ones.
        self.protocols: weakref.WeakSet[H2Protocol] = weakref.WeakSet()
        self.refusing = False

    def _protocol_factory(self) -> H2Protocol:
        plain = super()._protocol_factory()
        protocol = H2Protocol(_RefusingHandler(plain.handler, lambda: self.refusing),
                              plain.config, plain.h2_config)
        self.protocols.add(protocol)
        return protocol


class StartupGrpcResponder:
    """Answers on ``sock`` (a duplicate of it) from a thread until :meth:`stop`;
    :attr:`phase` says where start-up is (set from the daemon's thread)."""

    def __init__(self, sock: socket.socket, service: str, version: str, *,
                 max_message_bytes: int) -> None:
        self.phase = "opening the journal"
        self._sock = sock
        self._service = service
        self._version = version
        self._max = max_message_bytes
        self._listening = threading.Event()
        self._failed: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._finished: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()),
                                        name="palyra-starting-grpc", daemon=True)

    def set_phase(self, phase: str) -> None:
        """Where start-up is now (named in every answer)."""
        self.phase = phase

    def start(self) -> None:
        """Begin answering; returns once the responder accepts connections."""
        self._thread.start()
        self._listening.wait()
        if self._failed is not None:
            raise self._failed

    def stop(self) -> None:
        """End the watches, close every connection with a GOAWAY, stop accepting; again
        is harmless. Connections arriving after this wait for the real gateway."""
        loop, finished = self._loop, self._finished
        if loop is not None and finished is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(finished.set)
            self._thread.join()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        finished = self._finished = asyncio.Event()
        health = _StartingHealth(finished)
        server = _TrackedServer([health, _StartingRpcs(lambda: self.phase, self._service,
                                                       self._version)],
                                codec=CappedProtoCodec(self._max))
        try:
            # A duplicate: closing the responder's server closes its socket, and the
            # listening socket itself must stay open for the real gateway.
            await server.start(sock=self._sock.dup())
        except BaseException as exc:
            self._failed = exc
            return
        finally:
            self._listening.set()
        await finished.wait()
        server.refusing = True
        if health.watching:  # each ends UNAVAILABLE ("watch again") on its own
            await asyncio.wait(set(health.watching), timeout=WATCH_DRAIN_S)
        server.close()  # stops accepting; cancels whatever is still being answered
        for protocol in list(server.protocols):
            _goaway(protocol)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_S):
                await server.wait_closed()


def _goaway(protocol: H2Protocol) -> None:
    """Tell the client this connection takes no more streams (GOAWAY), then close it."""
    connection = getattr(protocol, "connection", None)  # absent: never connected
    if connection is None or connection.is_closing():
        return
    # grpclib has no public call for a GOAWAY; its Connection holds the h2 connection.
    connection._connection.close_connection()
    connection.flush()
    connection.close()
