"""``fs.apply_patch``: a unified diff applied to the workspace, all or nothing.

Every file the patch names is resolved inside the workspace (the same rules as
``fs.write``), read, and patched in memory; if any hunk of any file does not
apply cleanly, nothing is written and the model hears which hunk failed. Then
each new content is staged in a temporary file beside its target (written and
fsync'd), and only when all are staged are they renamed into place (deletions
last), so a failure while staging leaves every file as it was and each file is
replaced atomically. The SHA-256 of each file before and after is in the output
and in the attestation's facts (``patch:<path>`` = ``<before>:<after>``, empty
for an absent file), so the tape shows exactly which versions were changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

import msgspec

from palyra.core.capabilities import Capability
from palyra.tools._patch import FilePatch, PatchError, apply_file, parse_patch
from palyra.tools._spec import ToolContext, ToolError, ToolOutput, ToolSpec
from palyra.tools._workspace import resolve_in_workspace

MAX_FILE_BYTES = 4 * 1024 * 1024  # a patch target larger than this is refused
MAX_FILES = 64


class PatchArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of ``fs.apply_patch``: the unified diff's text."""

    patch: str


def _sha256(data: bytes | None) -> str:
    return "" if data is None else hashlib.sha256(data).hexdigest()


def _read(target: Path, shown: str) -> bytes | None:
    if target.is_dir():
        raise ToolError(f"{shown!r} is a directory")
    if not target.exists():
        return None
    if target.stat().st_size > MAX_FILE_BYTES:
        raise ToolError(f"{shown!r} is over {MAX_FILE_BYTES} bytes; not patched")
    return target.read_bytes()


def _stage(target: Path, data: bytes) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".patch", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


def _apply(root: Path, files: tuple[FilePatch, ...]) -> list[dict[str, str]]:
    plan: list[tuple[Path, str, bytes | None, bytes | None]] = []
    for patch in files:
        target = resolve_in_workspace(root, patch.path)
        if target == root.resolve():
            raise ToolError("cannot patch the workspace root itself")
        before = _read(target, patch.path)
        try:
            text = None if before is None else before.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ToolError(f"{patch.path!r} is not UTF-8 text; not patched") from exc
        try:
            after_text = apply_file(patch, text)
        except PatchError as exc:
            raise ToolError(f"the patch does not apply: {exc}") from exc
        after = None if after_text is None else after_text.encode("utf-8")
        plan.append((target, patch.path, before, after))
    staged: list[tuple[Path, Path]] = []
    try:
        for target, _, _, after in plan:
            if after is not None:
                staged.append((_stage(target, after), target))
    except BaseException:
        for temp, _ in staged:
            temp.unlink(missing_ok=True)
        raise
    for temp, target in staged:
        os.replace(temp, target)
    for target, _, _, after in plan:
        if after is None:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
    return [{"path": shown, "before_sha256": _sha256(before), "after_sha256": _sha256(after)}
            for _, shown, before, after in plan]


async def _apply_patch(args: PatchArgs, ctx: ToolContext) -> ToolOutput:
    try:
        files = parse_patch(args.patch)
    except PatchError as exc:
        raise ToolError(f"not a usable unified diff: {exc}") from exc
    if len(files) > MAX_FILES:
        raise ToolError(f"the patch touches {len(files)} files; at most {MAX_FILES}")
    changed = await asyncio.to_thread(_apply, ctx.workspace_dir, files)
    facts = {f"patch:{f['path']}": f"{f['before_sha256']}:{f['after_sha256']}" for f in changed}
    return ToolOutput({"files": changed}, facts=facts)


FS_APPLY_PATCH: ToolSpec[PatchArgs] = ToolSpec(
    "fs.apply_patch",
    "Apply a unified diff (diff -u / git diff) to workspace files, all or nothing; "
    "refused unless every hunk applies exactly.",
    PatchArgs,
    frozenset({Capability.FILESYSTEM_WRITE}),
    _apply_patch,
    timeout_s=20.0,
)
