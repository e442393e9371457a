"""All configured MCP servers, started and stopped together."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from types import TracebackType

from palyra.tools._registry import ToolRegistry
from palyra.tools.mcp.config import McpServerConfig
from palyra.tools.mcp.server import McpServer

log = logging.getLogger("palyra.tools.mcp")


class McpHub:
    """Starts each server, waits (bounded) for its first listing, stops them at exit."""

    def __init__(self, registry: ToolRegistry, configs: Sequence[McpServerConfig]) -> None:
        self.servers = {c.name: McpServer(c, registry) for c in configs}

    async def __aenter__(self) -> McpHub:
        for server in self.servers.values():
            server.start()
        # A server that is slow or down does not hold the daemon back: it keeps
        # being retried, and its tools appear when it answers.
        ready = await asyncio.gather(*(s.wait_ready(s.config.connect_timeout_s)
                                       for s in self.servers.values()))
        for server, ok in zip(self.servers.values(), ready, strict=True):
            if not ok:
                log.warning("mcp server %s is not up yet; retrying in the background",
                            server.config.name)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await asyncio.gather(*(s.close() for s in self.servers.values()))
