"""Resolving model-supplied paths inside the workspace, safely.

A path is allowed only if, after resolving ``..`` and every symlink, it is
inside the workspace root, and no component (as requested or as resolved)
is a protected directory. Protected names hold credentials or history a tool
has no business touching: ``.git``, ``.ssh``, ``.aws``.

Known limit: the check and the later open are two steps, so a process that
swaps a directory for a symlink in between could race it. Tools run inside
the daemon's own workspace, which no other principal writes to.
"""

from __future__ import annotations

from pathlib import Path

from palyra.tools._spec import ToolError

BLOCKED_COMPONENTS: frozenset[str] = frozenset({".git", ".ssh", ".aws"})


def is_blocked_name(name: str) -> bool:
    """Whether a single path component is protected (case-insensitive)."""
    return name.lower() in BLOCKED_COMPONENTS


def resolve_in_workspace(root: Path, requested: str) -> Path:
    """Resolve ``requested`` against the workspace ``root``.

    Args:
        root: The workspace directory.
        requested: A relative path from the model (absolute paths are accepted
            only if they land inside the root).

    Returns:
        The resolved absolute path (it may not exist yet).

    Raises:
        ToolError: If the path escapes the workspace or touches a protected
            directory.
    """
    if "\x00" in requested:
        raise ToolError(f"path {requested!r} contains a NUL byte")
    base = root.resolve()
    target = (base / requested).resolve()
    if not target.is_relative_to(base):
        raise ToolError(f"path {requested!r} is outside the workspace")
    for part in (*Path(requested).parts, *target.relative_to(base).parts):
        if is_blocked_name(part):
            raise ToolError(f"path {requested!r} touches protected directory {part!r}")
    return target
