"""The stdio transport of an MCP server, with a bound on what one message may hold.

The SDK's ``stdio_client`` buffers a server's stdout until a newline comes, so a
server that writes without one grows the daemon's memory without limit. This
transport frames the same newline-delimited JSON-RPC (the SDK's own message
types and validation, the SDK's ``ClientSession`` on top) from bytes, and a line
longer than ``max_line_bytes`` ends the connection: the session's calls fail,
the log says why, and the supervisor starts the server again. The pipe's buffer
holds at most twice that bound (asyncio stops reading the pipe beyond it).

The streams handed to the session are not memory channels fed by reader and
writer tasks: the session's ``send`` writes the line to the pipe itself, and its
``receive`` reads the next line from the pipe itself. A call then wakes one task
less each way, which is most of what a call costs on the daemon's side.

The server runs in its own session (process group) with the SDK's small default
environment plus its configured one; closing stops it: stdin closed, then
SIGTERM to its group, then SIGKILL.
"""

from __future__ import annotations

import asyncio
import asyncio.subprocess
import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import anyio
from mcp import types
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

log = logging.getLogger("palyra.tools.mcp")

# How long a server may take to exit after its stdin closes, then after SIGTERM.
EXIT_WAIT_S = 2.0


class LineReceiveStream:
    """The session's read stream: the server's next message, read from its stdout.

    One message per line; a line over ``max_line_bytes`` or the pipe's end ends
    the stream (``anyio.EndOfStream``), which the session treats as the server
    gone. A line that is not a JSON-RPC message is handed on as the exception
    saying why (the session passes it to its message handler, which logs it).
    """

    def __init__(self, stdout: asyncio.StreamReader, name: str, max_line_bytes: int) -> None:
        self._stdout = stdout
        self._name = name
        self._max_line_bytes = max_line_bytes
        self._closed = False

    async def receive(self) -> SessionMessage | Exception:
        """The next message (blank lines are skipped).

        Raises:
            anyio.EndOfStream: The server closed its stdout or sent an overlong line.
            anyio.ClosedResourceError: This stream was closed.
        """
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                line = await self._stdout.readuntil(b"\n")
            except asyncio.IncompleteReadError:
                raise anyio.EndOfStream from None  # a last line without its newline is dropped
            except asyncio.LimitOverrunError:
                log.warning("mcp server %s sent a line over %d bytes; disconnecting",
                            self._name, self._max_line_bytes)
                self._closed = True
                raise anyio.EndOfStream from None
            if line.strip():
                return _message(line)

    async def aclose(self) -> None:
        """Stop reading (the pipe itself is closed when the server is stopped)."""
        self._closed = True

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()


class LineSendStream:
    """The session's write stream: each message written to the server's stdin as a line.

    A broken pipe closes the server's stdout too, so the session's reader sees
    the end at once and every call waiting on this server fails.
    """

    def __init__(self, stdin: asyncio.StreamWriter, stdout: asyncio.BaseTransport | None) -> None:
        self._stdin = stdin
        self._stdout = stdout
        self._closed = False

    async def send(self, item: SessionMessage, /) -> None:
        """Write one message and wait only if the pipe is full.

        Raises:
            anyio.BrokenResourceError: The server no longer reads its stdin.
            anyio.ClosedResourceError: This stream was closed.
        """
        if self._closed:
            raise anyio.ClosedResourceError
        data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
        try:
            if self._stdin.is_closing():
                raise ConnectionResetError("stdin is closed")
            self._stdin.write(data.encode() + b"\n")
            await self._stdin.drain()
        except (ConnectionError, OSError) as exc:
            self._closed = True
            if self._stdout is not None:
                self._stdout.close()  # the reader sees the end of the stream
            raise anyio.BrokenResourceError from exc

    async def aclose(self) -> None:
        """Stop writing (stdin itself is closed when the server is stopped)."""
        self._closed = True

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()


@contextlib.asynccontextmanager
async def capped_stdio(command: str, args: Sequence[str], env: Mapping[str, str] | None,
                       cwd: str | None, max_line_bytes: int) -> AsyncIterator[Any]:
    """Start the server and yield the ``(read, write)`` streams a ``ClientSession`` takes."""
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.subprocess_exec(
        lambda: asyncio.subprocess.SubprocessStreamProtocol(limit=max_line_bytes, loop=loop),
        command, *args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None,
        env={**get_default_environment(), **(env or {})}, cwd=cwd, start_new_session=True)
    process = asyncio.subprocess.Process(transport, protocol, loop)
    try:
        assert process.stdin is not None and process.stdout is not None
        yield (LineReceiveStream(process.stdout, command, max_line_bytes),
               LineSendStream(process.stdin, transport.get_pipe_transport(1)))
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process)
            transport.close()  # its pipes too


def _message(line: bytes) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        return exc  # the session hands it to the message handler, which logs it


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.stdin is not None:
        process.stdin.close()
    for sig in (signal.SIGTERM, signal.SIGKILL, None):
        with anyio.move_on_after(EXIT_WAIT_S):
            await process.wait()
            break
        if sig is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
