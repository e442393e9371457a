"""Workspace file tools: fs.read, fs.list, fs.write.

File I/O runs in a worker thread so the tool timeout and cancellation apply
to the event loop side (a blocked disk cannot stall other runs).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec

from palyra.core.capabilities import Capability
from palyra.tools._spec import ToolContext, ToolError, ToolOutput, ToolSpec
from palyra.tools._workspace import is_blocked_name, resolve_in_workspace

# fs.read's own cap; the registry's output cap still applies on top.
READ_LIMIT_BYTES = 48 * 1024
LIST_LIMIT_ENTRIES = 1000


class PathArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A workspace-relative path."""

    path: str = "."


class WriteArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of ``fs.write``."""

    path: str
    content: str


def _read(target: Path) -> tuple[bytes, int]:
    if not target.is_file():
        raise ToolError(f"{target.name!r} is not a file")
    with target.open("rb") as fh:
        data = fh.read(READ_LIMIT_BYTES + 1)
    return data, target.stat().st_size


async def _fs_read(args: PathArgs, ctx: ToolContext) -> ToolOutput:
    target = resolve_in_workspace(ctx.workspace_dir, args.path)
    data, size = await asyncio.to_thread(_read, target)
    truncated = len(data) > READ_LIMIT_BYTES
    content = data[:READ_LIMIT_BYTES].decode("utf-8", "replace")
    return ToolOutput(
        {"path": args.path, "size": size, "content": content, "truncated": truncated},
        truncated=truncated,
    )


def _list(target: Path) -> list[dict[str, object]]:
    if not target.is_dir():
        raise ToolError(f"{target.name!r} is not a directory")
    entries = []
    for child in sorted(target.iterdir()):
        if is_blocked_name(child.name):
            continue  # do not even reveal protected directories
        kind = "dir" if child.is_dir() else "file" if child.is_file() else "other"
        entry: dict[str, object] = {"name": child.name, "kind": kind}
        if kind == "file":
            entry["size"] = child.stat().st_size
        entries.append(entry)
        if len(entries) >= LIST_LIMIT_ENTRIES:
            break
    return entries


async def _fs_list(args: PathArgs, ctx: ToolContext) -> ToolOutput:
    target = resolve_in_workspace(ctx.workspace_dir, args.path)
    entries = await asyncio.to_thread(_list, target)
    return ToolOutput({"path": args.path, "entries": entries})


def _write(target: Path, content: str) -> int:
    if target.is_dir():
        raise ToolError(f"{target.name!r} is a directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode()
    target.write_bytes(data)
    return len(data)


async def _fs_write(args: WriteArgs, ctx: ToolContext) -> ToolOutput:
    target = resolve_in_workspace(ctx.workspace_dir, args.path)
    if target == ctx.workspace_dir.resolve():
        raise ToolError("cannot write to the workspace root itself")
    written = await asyncio.to_thread(_write, target, args.content)
    return ToolOutput({"path": args.path, "bytes_written": written})


FS_READ: ToolSpec[PathArgs] = ToolSpec(
    "fs.read",
    "Read a UTF-8 text file from the workspace.",
    PathArgs,
    frozenset({Capability.READ_ONLY}),
    _fs_read,
    timeout_s=10.0,
)
FS_LIST: ToolSpec[PathArgs] = ToolSpec(
    "fs.list",
    "List a workspace directory.",
    PathArgs,
    frozenset({Capability.READ_ONLY}),
    _fs_list,
    timeout_s=10.0,
)
FS_WRITE: ToolSpec[WriteArgs] = ToolSpec(
    "fs.write",
    "Write (create or replace) a UTF-8 text file in the workspace.",
    WriteArgs,
    frozenset({Capability.FILESYSTEM_WRITE}),
    _fs_write,
    timeout_s=10.0,
)
