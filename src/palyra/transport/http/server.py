"""The HTTP listener: uvicorn serving the Litestar gateway on a pre-bound socket."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Generator

import uvicorn
from litestar.types import ASGIApp

from palyra.config import HttpConfig
from palyra.transport.http._limits import bounded_protocol


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the daemon owns SIGINT/SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class HttpGateway:
    """Owns one uvicorn server; :meth:`serve` runs until :meth:`close` is called."""

    def __init__(self, app: ASGIApp, *, shutdown_grace_s: float = 5.0,
                 limits: HttpConfig | None = None) -> None:
        limits = limits or HttpConfig()
        config = uvicorn.Config(
            app,
            log_config=None,  # structlog configures logging; keep uvicorn quiet
            access_log=False,
            lifespan="off",
            # ASGI 3, said rather than guessed: the daemon's front (``_front.HttpFront``)
            # returns the awaitable of the part that answers from a plain ``__call__``,
            # which uvicorn's guess would take for ASGI 2.
            interface="asgi3",
            timeout_graceful_shutdown=max(1, round(shutdown_grace_s)),
            server_header=False,
            # Nothing here reads the scope's client or scheme, and a loopback client is
            # not a proxy to believe: no X-Forwarded-* rewriting, and no middleware
            # layer every request's task passes through on each resumption.
            proxy_headers=False,
            # httptools (llhttp, in C) with the head's size and time bounds added.
            http=bounded_protocol(limits.header_timeout_s, limits.max_header_bytes,
                                  limits.body_timeout_s, limits.body_min_bytes_per_s),
            timeout_keep_alive=max(1, round(limits.keepalive_s)),
        )
        self._server = _Server(config)

    async def serve(self, sock: socket.socket) -> None:
        """Serve on ``sock`` until closed."""
        await self._server.serve(sockets=[sock])

    def close(self) -> None:
        """Ask the server to stop accepting and finish (cancels open SSE streams)."""
        self._server.should_exit = True
