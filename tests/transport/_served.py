"""Servers on loopback ports for transport tests: a raw ASGI app behind the daemon's own HTTP
gateway, and an app behind its gRPC listener with every caller let in."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from palyra.app import CallContext, PalyraApp
from palyra.config import GrpcConfig
from palyra.daemon.listen import bind_listener, bound_port
from palyra.transport.auth import Caller
from palyra.transport.grpc import GrpcGateway
from palyra.transport.http import HttpGateway


@asynccontextmanager
async def served_by_gateway(app: Any) -> AsyncIterator[tuple[HttpGateway, int]]:
    """``app`` behind ``HttpGateway`` (uvicorn with palyra's protocol): the gateway, its port."""
    sock = bind_listener("127.0.0.1", 0)
    http = HttpGateway(app)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(http.serve(sock))
        yield http, bound_port(sock)
        http.close()
    sock.close()


async def grpc_listening(app: PalyraApp, config: GrpcConfig | None = None, *,
                         principal: str = "user:tape") -> tuple[GrpcGateway, int]:
    """``app`` behind the gRPC listener on a loopback port, every caller let in as
    ``principal``: the gateway (close it) and its port."""
    caller = Caller(principal=principal, device_id="01J00000000000000000000000",
                    token_kind="admin", channel="", request_id="")

    class Allow:
        def authenticate(self, rpc: str, headers: dict[str, str]) -> Caller:
            return caller

    gateway = GrpcGateway(app, authenticator=Allow(),  # type: ignore[arg-type]
                          make_ctx=CallContext.from_caller, config=config or GrpcConfig())
    sock = bind_listener("127.0.0.1", 0)
    await gateway.start(sock)
    return gateway, bound_port(sock)
