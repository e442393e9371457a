"""One MCP server: connect, list its tools into the registry, call them, stay up.

The connection lives in one supervising task (the SDK's transports are anyio
context managers, entered and left by the same task). It starts the server (stdio)
or opens the session (streamable HTTP), lists the tools into the registry, then
waits for a ``tools/list_changed`` (re-list), a broken connection or the ping
interval (a ping that fails or hangs reconnects). Any failure is logged and
retried with exponential backoff; the daemon never goes down with a server.

Calls come from run tasks through the session the supervisor holds. While the
server is down its tools stay registered and fail at once with a clear error,
so the catalogue does not flap with every restart; a tool the server stops
listing is unregistered and its calls are refused as unknown. A call honours
the run's cancellation and the tool timeout: both cancel the awaiting task, and
the SDK then sends ``notifications/cancelled`` for the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pydantic
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from palyra.tools._registry import ToolRegistry
from palyra.tools._spec import ToolContext, ToolError, ToolOutput, ToolSpec
from palyra.tools.mcp.config import McpServerConfig
from palyra.tools.mcp.convert import (
    argument_checker,
    error_text,
    registry_name,
    result_value,
    schema_digest,
    usable_tool_name,
)
from palyra.tools.mcp.stdio import capped_stdio

log = logging.getLogger("palyra.tools.mcp")
_LIST_PAGES = 32  # a server listing more pages than this is cut (and logged)


class McpServer:
    """Supervises one configured server and keeps its tools in ``registry``."""

    def __init__(self, config: McpServerConfig, registry: ToolRegistry) -> None:
        self.config = config
        self._registry = registry
        self._session: ClientSession | None = None
        self._server_name = ""
        self._server_version = ""
        self._tools: dict[str, ToolSpec[Any]] = {}  # registry name -> spec
        self._ready = asyncio.Event()
        self._relist = asyncio.Event()
        self._broken = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.connects = 0  # successful connections so far (restarts + 1)

    @property
    def connected(self) -> bool:
        """Whether calls can be made now."""
        return self._session is not None

    def tool_names(self) -> list[str]:
        """The registry names of the tools this server currently provides."""
        return sorted(self._tools)

    def start(self) -> None:
        """Start supervising (connects in the background)."""
        self._task = asyncio.create_task(self._supervise(), name=f"mcp:{self.config.name}")

    async def wait_ready(self, timeout_s: float) -> bool:
        """Wait until the server is connected and listed, at most ``timeout_s``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._ready.wait()
        return self._ready.is_set()

    async def close(self) -> None:
        """Stop the server (stdio) or session, and unregister its tools."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for name in list(self._tools):
            self._registry.unregister(name)
        self._tools.clear()

    # -- the supervising task -------------------------------------------------
    async def _supervise(self) -> None:
        delay = self.config.restart_initial_s
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            try:
                await self._connect_once()
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                log.warning("mcp server %s failed: %s; reconnecting in %.1fs", self.config.name,
                            _describe(exc), delay)
            finally:
                self._session = None
                self._ready.clear()
            if loop.time() - began > self.config.restart_max_s:
                delay = self.config.restart_initial_s  # it had been up a while: start over
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.config.restart_max_s)

    async def _connect_once(self) -> None:
        async with contextlib.AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport())
            session = await stack.enter_async_context(
                ClientSession(read, write, message_handler=self._on_message))
            async with asyncio.timeout(self.config.connect_timeout_s):
                init = await session.initialize()
                self._server_name = init.server_info.name
                self._server_version = init.server_info.version
                await self._list(session)
            self._relist.clear()
            self._broken.clear()
            self._session = session
            self.connects += 1
            self._ready.set()
            log.info("mcp server %s connected (%s %s, %d tools)", self.config.name,
                     self._server_name, self._server_version, len(self._tools))
            await self._serve(session)

    async def _serve(self, session: ClientSession) -> None:
        """Re-list on demand, check the connection when idle, return when broken."""
        while not self._broken.is_set():
            waiters = {asyncio.ensure_future(self._relist.wait()),
                       asyncio.ensure_future(self._broken.wait())}
            try:
                await asyncio.wait(waiters, timeout=self.config.ping_interval_s,
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()
            if self._broken.is_set():
                raise ConnectionError("the connection broke during a call")
            async with asyncio.timeout(self.config.connect_timeout_s):
                if self._relist.is_set():
                    self._relist.clear()
                    await self._list(session)
                else:
                    await session.send_ping()

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[Any]:
        config = self.config
        if config.command:
            async with capped_stdio(config.command, config.args, config.env,
                                    config.cwd or None, config.max_message_bytes) as streams:
                yield streams
            return
        headers = {}
        if config.header:
            value = os.environ.get(config.header_env)
            if value is None:
                raise ConnectionError(f"environment variable {config.header_env} is not set")
            headers[config.header] = value
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)
                                      ) as client, streamable_http_client(
                config.url, http_client=client) as streams:
            yield streams

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._relist.set()
        elif isinstance(message, Exception):
            log.warning("mcp server %s sent a malformed message: %s", self.config.name,
                        _describe(message))

    async def _list(self, session: ClientSession) -> None:
        listed: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(_LIST_PAGES):
            page = await session.list_tools(
                params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
            listed += page.tools
            cursor = page.next_cursor
            if not cursor:
                break
        else:
            log.warning("mcp server %s lists over %d pages of tools; the rest are ignored",
                        self.config.name, _LIST_PAGES)
        fresh: dict[str, ToolSpec[Any]] = {}
        for tool in listed:
            spec = self._spec(tool)
            if spec is not None:
                fresh[spec.name] = spec
        for name in set(self._tools) - set(fresh):
            self._registry.unregister(name)
            log.info("mcp server %s no longer lists %s", self.config.name, name)
        for name, spec in fresh.items():
            old = self._tools.get(name)
            if old is None:
                self._registry.register(spec)
            elif _digest_of(old) != _digest_of(spec):
                self._registry.replace(spec)
                log.info("mcp server %s changed the definition of %s", self.config.name, name)
                continue
            else:
                fresh[name] = old  # unchanged: keep the object the gate has seen
        self._tools = fresh

    def _spec(self, tool: types.Tool) -> ToolSpec[Any] | None:
        if not usable_tool_name(tool.name):
            log.warning("mcp server %s: tool name %r is not usable; skipped", self.config.name,
                        tool.name)
            return None
        schema = dict(tool.input_schema or {"type": "object"})
        try:
            check = argument_checker(schema)
        except Exception as exc:
            log.warning("mcp server %s: tool %s has an invalid schema (%s); skipped",
                        self.config.name, tool.name, exc)
            return None
        description = tool.description or tool.title or tool.name
        digest = schema_digest(tool.name, description, schema)
        remote = tool.name

        async def handler(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
            return await self._call(remote, arguments, digest)

        return ToolSpec(
            registry_name(self.config.name, tool.name), description, dict,
            self.config.capabilities_of(tool.name), handler, timeout_s=self.config.timeout_s,
            max_output_bytes=self.config.max_output_bytes, executor="mcp", input_schema=schema,
            check_args=check, origin=self.config.name)

    # -- calls ----------------------------------------------------------------
    def _facts(self, digest: str) -> dict[str, str]:
        return {"mcp.server": self.config.name, "mcp.server_name": self._server_name,
                "mcp.server_version": self._server_version, "mcp.schema_sha256": digest}

    async def _call(self, remote: str, arguments: dict[str, Any], digest: str) -> ToolOutput:
        facts = self._facts(digest)
        session = self._session
        if session is None:
            raise ToolError(f"MCP server {self.config.name!r} is not connected (it is being "
                            "restarted); try again later", facts=facts)
        try:
            result = await session.call_tool(remote, arguments)
        except MCPError as exc:
            if "closed" in str(exc).lower():
                self._broken.set()  # the supervisor reconnects
            log.warning("mcp server %s: call %s failed: %s", self.config.name, remote, exc)
            raise ToolError(f"MCP server {self.config.name!r}: {exc}", facts=facts) from exc
        except (pydantic.ValidationError, RuntimeError) as exc:
            log.warning("mcp server %s: bad answer to %s: %s", self.config.name, remote, exc)
            raise ToolError(f"MCP server {self.config.name!r} answered with a malformed "
                            f"result: {type(exc).__name__}", facts=facts) from exc
        if not isinstance(result, types.CallToolResult):
            raise ToolError(f"MCP server {self.config.name!r} asked for input palyra cannot "
                            "give", facts=facts)
        content = [block.model_dump(by_alias=True, mode="json") for block in result.content]
        size = sum(len(str(block.get("text") or block.get("data") or "")) for block in content)
        if size > self.config.max_output_bytes:
            raise ToolError(f"MCP server {self.config.name!r} returned {size} bytes, over the "
                            f"{self.config.max_output_bytes}-byte limit", facts=facts)
        if result.is_error:
            raise ToolError(error_text(content), facts=facts)
        value, images = result_value(content, result.structured_content)
        if images:  # the attestation covers which images the result attached
            facts["mcp.images_sha256"] = ",".join(i.sha256 for i in images)
        return ToolOutput(value, facts=facts, images=images)


def _digest_of(spec: ToolSpec[Any]) -> str:
    return schema_digest(spec.name, spec.description, spec.input_schema or {})


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
