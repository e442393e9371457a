"""A raw ASGI app served by the daemon's own HTTP gateway on a loopback port."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from palyra.daemon.listen import bind_listener, bound_port
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
