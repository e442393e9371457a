"""The gRPC listener: generated services + auth + error mapping on one socket."""

from __future__ import annotations

import socket
from typing import Any

from grpclib.server import Server

from palyra.config import GrpcConfig
from palyra.transport.auth import Authenticator
from palyra.transport.context import ContextFactory
from palyra.transport.grpc._codec import CappedProtoCodec
from palyra.transport.grpc._gateway import install
from palyra.transport.grpc._services import build_services


class GrpcGateway:
    """Owns one grpclib ``Server`` bound to an already-listening socket."""

    def __init__(
        self,
        app: object,
        *,
        authenticator: Authenticator,
        make_ctx: ContextFactory,
        config: GrpcConfig,
    ) -> None:
        services: list[Any] = list(build_services(app, make_ctx))
        self._server = Server(services, codec=CappedProtoCodec(config.max_message_bytes))
        install(self._server, authenticator)

    async def start(self, sock: socket.socket) -> None:
        """Start serving on ``sock`` (bound by the caller, so port 0 is known up front)."""
        await self._server.start(sock=sock)

    async def close(self) -> None:
        """Stop accepting, cancel in-flight calls, and wait until they are gone."""
        self._server.close()
        await self._server.wait_closed()
