"""The HTTP listener: uvicorn serving the Litestar gateway on a pre-bound socket."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Generator

import uvicorn
from litestar import Litestar


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the daemon owns SIGINT/SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class HttpGateway:
    """Owns one uvicorn server; :meth:`serve` runs until :meth:`close` is called."""

    def __init__(self, app: Litestar, *, shutdown_grace_s: float = 5.0) -> None:
        config = uvicorn.Config(
            app,
            log_config=None,  # structlog configures logging; keep uvicorn quiet
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=max(1, round(shutdown_grace_s)),
            server_header=False,
        )
        self._server = _Server(config)

    async def serve(self, sock: socket.socket) -> None:
        """Serve on ``sock`` until closed."""
        await self._server.serve(sockets=[sock])

    def close(self) -> None:
        """Ask the server to stop accepting and finish (cancels open SSE streams)."""
        self._server.should_exit = True
