"""``process.run``: run a program in the workspace (off unless enabled).

The child gets its own process group and a minimal environment (no API keys
from the daemon's environment). On timeout or cancellation the whole group
is killed and reaped before the cancellation continues, so no orphan keeps
running after its run was cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

import msgspec

from palyra.core.capabilities import Capability
from palyra.tools._spec import ToolContext, ToolError, ToolOutput, ToolSpec
from palyra.tools._workspace import resolve_in_workspace

STREAM_LIMIT_BYTES = 24 * 1024
_ENV_KEEP = ("PATH", "LANG", "LC_ALL", "TZ")


class RunArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of ``process.run``: argv (no shell) and a workspace cwd."""

    argv: list[str]
    cwd: str | None = None


async def _drain(stream: asyncio.StreamReader | None) -> tuple[bytes, bool]:
    """Read a pipe to EOF, keeping at most ``STREAM_LIMIT_BYTES``."""
    if stream is None:
        return b"", False
    kept = bytearray()
    truncated = False
    while chunk := await stream.read(65536):
        room = STREAM_LIMIT_BYTES - len(kept)
        if len(chunk) > room:
            truncated = True
        kept += chunk[: max(0, room)]
    return bytes(kept), truncated


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


async def _run(args: RunArgs, ctx: ToolContext) -> ToolOutput:
    if not args.argv:
        raise ToolError("argv must not be empty")
    cwd = resolve_in_workspace(ctx.workspace_dir, args.cwd or ".")
    env = {k: os.environ[k] for k in _ENV_KEEP if k in os.environ}
    env["HOME"] = str(ctx.workspace_dir)
    try:
        process = await asyncio.create_subprocess_exec(
            *args.argv,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        raise ToolError(f"cannot start {args.argv[0]!r}: {exc.strerror or exc}") from exc
    try:
        (stdout, out_cut), (stderr, err_cut), code = await asyncio.gather(
            _drain(process.stdout), _drain(process.stderr), process.wait()
        )
    finally:
        if process.returncode is None:
            # Timeout or cancel: kill the group, then reap it. The wait is
            # shielded so a second cancel cannot leave a zombie behind.
            _kill_group(process)
            await asyncio.shield(process.wait())
    truncated = out_cut or err_cut
    return ToolOutput(
        {
            "exit_code": code,
            "stdout": stdout.decode("utf-8", "replace"),
            "stderr": stderr.decode("utf-8", "replace"),
            "truncated": truncated,
        },
        truncated=truncated,
    )


PROCESS_RUN: ToolSpec[RunArgs] = ToolSpec(
    "process.run",
    "Run a program (argv, no shell) in the workspace; returns exit code and output.",
    RunArgs,
    frozenset({Capability.PROCESS_EXEC}),
    _run,
    timeout_s=60.0,
)
