"""``process.run``: run a program in the workspace (off unless enabled).

The child gets its own process group and a minimal environment (no API keys
from the daemon's environment), confined by the configured sandbox tier
(``_sandbox.py``: rlimits at tier b, a bubblewrap namespace sandbox at tier c),
which the attestation records. On timeout or cancellation the whole group is
killed and reaped before the cancellation continues, so no orphan keeps running
after its run was cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec

from palyra.core.capabilities import Capability
from palyra.tools._sandbox import RUNNING_POSTURES, SandboxConfig, command_line
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


def _ids(user: str) -> tuple[int, int] | None:
    if not user:
        return None
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise ToolError(f"sandbox user {user!r} does not exist") from None
    return entry.pw_uid, entry.pw_gid


def _find(program: str, cwd: Path, path: str | None) -> str | None:
    """The program's file, found here rather than by a wrapper: a missing program is
    "cannot start" at every tier, not a wrapper's exit code."""
    if "/" not in program:
        return shutil.which(program, path=path)
    target = cwd / program
    return str(target) if target.is_file() and os.access(target, os.X_OK) else None


def _runner(sandbox: SandboxConfig) -> Callable[[RunArgs, ToolContext], Awaitable[ToolOutput]]:
    # The confinement and the attestation's facts of each posture, computed once.
    by_posture = {posture: (confined, _facts(confined, posture))
                  for posture in ("", *RUNNING_POSTURES)
                  for confined in (sandbox.for_posture(posture),)}

    async def run(args: RunArgs, ctx: ToolContext) -> ToolOutput:
        confined, facts = by_posture.get(ctx.posture, by_posture[""])
        try:
            output = await _run(args, ctx, confined)
        except ToolError as exc:
            raise ToolError(exc.message, facts=facts) from exc
        return ToolOutput(output.value, truncated=output.truncated, facts=facts)

    return run


def _facts(confined: SandboxConfig, posture: str) -> dict[str, str]:
    facts = confined.facts()
    if posture:
        facts["sandbox.posture"] = posture
    return facts


async def _run(args: RunArgs, ctx: ToolContext, sandbox: SandboxConfig) -> ToolOutput:
    if not args.argv:
        raise ToolError("argv must not be empty")
    cwd = resolve_in_workspace(ctx.workspace_dir, args.cwd or ".")
    env = {k: os.environ[k] for k in _ENV_KEEP if k in os.environ}
    env["HOME"] = str(ctx.workspace_dir)
    if _find(args.argv[0], cwd, env.get("PATH")) is None:
        raise ToolError(f"cannot start {args.argv[0]!r}: no such program")
    argv = command_line(sandbox, [args.argv[0], *args.argv[1:]], ctx.workspace_dir, cwd,
                        _ids(sandbox.user))
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
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
            # A negative code is the signal that ended it (SIGXCPU, SIGKILL, ...).
            "signal": signal.Signals(-code).name if code < 0 else "",
            "stdout": stdout.decode("utf-8", "replace"),
            "stderr": stderr.decode("utf-8", "replace"),
            "truncated": truncated,
        },
        truncated=truncated,
    )


def process_run_tool(sandbox: SandboxConfig) -> ToolSpec[RunArgs]:
    """``process.run`` confined by ``sandbox`` (its tier chosen by the call's
    posture); MEDIUM risk where that tier is c with a read-only workspace (it
    can change nothing), HIGH otherwise."""
    return ToolSpec(
        "process.run",
        "Run a program (argv, no shell) in the workspace; returns exit code and output.",
        RunArgs,
        frozenset({Capability.PROCESS_EXEC}),
        _runner(sandbox),
        timeout_s=60.0,
        executor="sandbox",
        risk="medium" if sandbox.read_only else "",
        risk_by_posture={posture: "medium" if sandbox.for_posture(posture).read_only else "high"
                         for posture in RUNNING_POSTURES},
    )


PROCESS_RUN: ToolSpec[RunArgs] = process_run_tool(SandboxConfig())
