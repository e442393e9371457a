"""The stdio transport of an MCP server, with a bound on what one message may hold.

The SDK's ``stdio_client`` buffers a server's stdout until a newline comes, so a
server that writes without one grows the daemon's memory without limit. This
transport frames the same newline-delimited JSON-RPC (the SDK's own message
types and validation, the SDK's ``ClientSession`` on top) from bytes, and a line
longer than ``max_line_bytes`` ends the connection: the session's calls fail,
the log says why, and the supervisor starts the server again.

The server runs in its own session (process group) with the SDK's small default
environment plus its configured one; closing stops it: stdin closed, then
SIGTERM to its group, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio
import anyio.abc
from mcp import types
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

log = logging.getLogger("palyra.tools.mcp")

READ_CHUNK = 64 * 1024
# How long a server may take to exit after its stdin closes, then after SIGTERM.
EXIT_WAIT_S = 2.0


@contextlib.asynccontextmanager
async def capped_stdio(command: str, args: Sequence[str], env: Mapping[str, str] | None,
                       cwd: str | None, max_line_bytes: int) -> AsyncIterator[Any]:
    """Start the server and yield the ``(read, write)`` streams a ``ClientSession`` takes."""
    process = await anyio.open_process(
        [command, *args], env={**get_default_environment(), **(env or {})}, cwd=cwd,
        stderr=None, start_new_session=True)
    read_send, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_receive = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        assert process.stdout is not None
        buffer = bytearray()
        async with read_send:
            try:
                async for chunk in process.stdout:
                    buffer += chunk
                    while (end := buffer.find(b"\n")) >= 0:
                        line = bytes(buffer[:end])
                        del buffer[:end + 1]
                        if line.strip():
                            await read_send.send(_message(line))
                    if len(buffer) > max_line_bytes:
                        log.warning("mcp server %s sent a line over %d bytes; disconnecting",
                                    command, max_line_bytes)
                        return  # the session sees the stream end; its calls fail
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return

    async def writer() -> None:
        assert process.stdin is not None
        async with write_receive:
            try:
                async for message in write_receive:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                await read_send.aclose()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(reader)
        tasks.start_soon(writer)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await _stop(process)
            tasks.cancel_scope.cancel()
            for stream in (read_stream, write_stream, read_send, write_receive):
                await stream.aclose()


def _message(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc  # the session hands it to the message handler, which logs it


async def _stop(process: anyio.abc.Process) -> None:
    if process.stdin is not None:
        with contextlib.suppress(Exception):
            await process.stdin.aclose()
    for sig in (signal.SIGTERM, signal.SIGKILL, None):
        with anyio.move_on_after(EXIT_WAIT_S):
            await process.wait()
            break
        if sig is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
    with anyio.move_on_after(EXIT_WAIT_S):
        await process.aclose()  # its pipes too
