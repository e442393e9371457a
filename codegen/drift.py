"""Byte comparison of a freshly generated tree against the committed one (``--check``)."""

from __future__ import annotations

import difflib
from pathlib import Path

# Interpreter caches appear when generated code is imported; they are not output.
_IGNORED_PARTS = frozenset({"__pycache__"})
# `npm pack` run inside generated/ts leaves its tarball there (git ignores it too).
_IGNORED_SUFFIXES = (".tgz",)
# How the diff names a file codegen does not write (``unexpected_files`` reads it back).
UNEXPECTED = "not produced by codegen"


def tree_files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative POSIX path → bytes), caches excluded."""
    if not root.is_dir():
        return {}
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not _IGNORED_PARTS.intersection(p.relative_to(root).parts)
        and not p.name.endswith(_IGNORED_SUFFIXES)
    }


def unexpected_files(diff: str) -> list[str]:
    """The files a ``diff_trees`` diff names as not written by codegen."""
    return [line[4:].split(": ", 1)[0] for line in diff.splitlines()
            if line.startswith("--- ") and UNEXPECTED in line]


def diff_trees(expected_root: Path, actual_root: Path, label: str = "generated") -> str:
    """A unified diff from ``actual_root`` (committed) to ``expected_root`` (fresh); "" if equal."""
    expected, actual = tree_files(expected_root), tree_files(actual_root)
    chunks: list[str] = []
    for rel in sorted(expected.keys() | actual.keys()):
        want, have = expected.get(rel), actual.get(rel)
        if want == have:
            continue
        if want is None:
            chunks.append(
                f"--- {label}/{rel}: {UNEXPECTED}: a hand-made or leftover file "
                "(delete it, or fix the spec if codegen should write it)\n"
            )
        if have is None:
            chunks.append(f"+++ {label}/{rel}: missing (run `python -m codegen`)\n")
        if want is None or have is None:
            continue
        chunks.extend(
            difflib.unified_diff(
                have.decode("utf-8", "replace").splitlines(keepends=True),
                want.decode("utf-8", "replace").splitlines(keepends=True),
                fromfile=f"{label}/{rel} (committed)",
                tofile=f"{label}/{rel} (regenerated)",
            )
        )
        if chunks and not chunks[-1].endswith("\n"):
            chunks.append("\n")
    return "".join(chunks)
