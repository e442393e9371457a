"""The gRPC listener: generated services + auth + error mapping on one socket."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Generic

from grpclib.protocol import H2Protocol
from grpclib.server import Server
from palyra_gen.services import GatewayServiceServer, PalyraServicesApp, servers

from palyra.config import GrpcConfig
from palyra.transport.auth import Authenticator
from palyra.transport.context import ContextFactory, CtxT, current_caller
from palyra.transport.grpc._codec import CappedProtoCodec, install_length_check
from palyra.transport.grpc._cork import CorkedH2Protocol
from palyra.transport.grpc._gateway import install
from palyra.transport.grpc._health import health_service
from palyra.transport.grpc._tape import TapeGatewayServer
from palyra.transport.streams import OpenStreams


class _CorkedServer(Server):
    """grpclib's ``Server`` whose connections write through a cork (see ``_cork``)."""

    def _protocol_factory(self) -> H2Protocol:
        plain = super()._protocol_factory()
        return CorkedH2Protocol(plain.handler, plain.config, plain.h2_config)


class GrpcGateway(Generic[CtxT]):
    """Owns one grpclib ``Server`` bound to an already-listening socket.

    Every service is the generated ``<Service>Server``: typed methods that
    forward each RPC to ``app`` with the context ``make_ctx`` builds from the
    caller the auth listener published (``current_caller``). RunStream sends each
    commit's tape events encoded once, straight from the stored events (``_tape``).
    The standard ``grpc.health.v1.Health`` service answers SERVING while ``ready()``
    (the daemon's readiness checks all pass); without ``ready`` it always does.
    """

    def __init__(
        self,
        app: PalyraServicesApp[CtxT],
        *,
        authenticator: Authenticator,
        make_ctx: ContextFactory[CtxT],
        config: GrpcConfig,
        streams: OpenStreams | None = None,
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        install_length_check()
        ctx = lambda: make_ctx(current_caller.get())  # noqa: E731
        services = servers(app, ctx)
        # RunStream sends each commit's tape as bytes (see _tape).
        services = [TapeGatewayServer(app, ctx, config.max_message_bytes)
                    if isinstance(s, GatewayServiceServer) else s for s in services]
        services.append(health_service(ready, services))
        self._server = _CorkedServer(services, codec=CappedProtoCodec(config.max_message_bytes))
        install(self._server, authenticator, streams)

    async def start(self, sock: socket.socket) -> None:
        """Start serving on ``sock`` (bound by the caller, so port 0 is known up front)."""
        await self._server.start(sock=sock)

    async def close(self) -> None:
        """Stop accepting, cancel in-flight calls, and wait until they are gone."""
        self._server.close()
        await self._server.wait_closed()
