"""Unified diffs: parse, and apply to in-memory file contents (pure).

``fs.apply_patch`` (``_builtin_patch.py``) reads the files, asks :func:`apply_patch`
for every new content, and writes only if every hunk of every file applied.
Application is strict: a hunk applies only at the line its header names, with
every context and removed line equal to the file's, so a patch made against
another version of a file is refused rather than guessed into place.
"""

from __future__ import annotations

import dataclasses
import re

DEV_NULL = "/dev/null"
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NO_NEWLINE = "\\ No newline at end of file"


class PatchError(ValueError):
    """The patch is malformed or does not apply; the message says where."""


@dataclasses.dataclass(frozen=True, slots=True)
class Hunk:
    """One ``@@`` block: where it starts in the old file, and its old and new lines.

    Lines keep their line ending; a line without one is the file's last.
    """

    old_start: int
    old: tuple[str, ...]
    new: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class FilePatch:
    """The hunks for one file. ``old_path`` or ``new_path`` is ``None`` for a
    created or deleted file."""

    old_path: str | None
    new_path: str | None
    hunks: tuple[Hunk, ...]

    @property
    def path(self) -> str:
        """The workspace path the patch touches."""
        path = self.new_path if self.new_path is not None else self.old_path
        assert path is not None  # parse_patch refuses /dev/null on both sides
        return path


def _strip_path(raw: str) -> str | None:
    # "--- a/src/x.py\t2024-01-01 ..." -> "src/x.py"; git's a/ and b/ prefixes go.
    path = raw.split("\t", 1)[0].strip()
    if path == DEV_NULL:
        return None
    if path.startswith(("a/", "b/")):
        path = path[2:]
    if not path:
        raise PatchError("a file header names no path")
    return path


def _hunk(lines: list[str], at: int, header: re.Match[str]) -> tuple[Hunk, int]:
    old_count = int(header.group(2) if header.group(2) is not None else 1)
    new_count = int(header.group(4) if header.group(4) is not None else 1)
    old: list[str] = []
    new: list[str] = []
    i = at
    # The header's counts say where the hunk ends: a removed line reading
    # "-- x" is still a removed line, not the next file's header.
    while len(old) < old_count or len(new) < new_count:
        if i >= len(lines):
            raise PatchError(f"hunk at line {at} ends early")
        line = lines[i]
        tag, body = line[:1], line[1:]
        if tag == " " or line in ("\n", ""):
            body = body if tag == " " else "\n"
            old.append(body)
            new.append(body)
        elif tag == "-":
            old.append(body)
        elif tag == "+":
            new.append(body)
        elif line.rstrip("\n") == _NO_NEWLINE:
            pass  # only meaningful right after a line, handled below
        else:
            raise PatchError(f"line {i + 1} of the patch is not part of a hunk: {line!r}")
        i += 1
        if i < len(lines) and lines[i].rstrip("\n") == _NO_NEWLINE:
            # The line just read has no newline in its file(s).
            if tag in (" ", "-"):
                old[-1] = old[-1].removesuffix("\n")
            if tag in (" ", "+"):
                new[-1] = new[-1].removesuffix("\n")
            i += 1
    if len(old) != old_count or len(new) != new_count:
        raise PatchError(f"hunk at line {at} does not match its header's line counts")
    return Hunk(int(header.group(1)), tuple(old), tuple(new)), i


def parse_patch(text: str) -> tuple[FilePatch, ...]:
    """Parse a unified diff (``diff -u``, ``git diff``) into per-file patches.

    Raises:
        PatchError: No file in it, a hunk outside a file, counts that do not
            match, or one file patched twice.
    """
    lines = text.splitlines(keepends=True)
    files: list[FilePatch] = []
    i = 0
    while i < len(lines):
        if not (lines[i].startswith("--- ") and i + 1 < len(lines)
                and lines[i + 1].startswith("+++ ")):
            i += 1  # "diff --git", "index ...", prose: not ours to read
            continue
        old_path, new_path = _strip_path(lines[i][4:]), _strip_path(lines[i + 1][4:])
        if old_path is None and new_path is None:
            raise PatchError(f"line {i + 1}: both sides are {DEV_NULL}")
        i += 2
        hunks: list[Hunk] = []
        while i < len(lines) and (header := _HUNK.match(lines[i])):
            hunk, i = _hunk(lines, i + 1, header)
            hunks.append(hunk)
        if not hunks:
            raise PatchError(f"line {i}: file {new_path or old_path!r} has no hunks")
        files.append(FilePatch(old_path, new_path, tuple(hunks)))
    if not files:
        raise PatchError("no file headers (--- / +++) found: not a unified diff")
    touched = [f.path for f in files]
    if len(set(touched)) != len(touched):
        raise PatchError("the patch changes one file twice")
    return tuple(files)


def apply_file(patch: FilePatch, content: str | None) -> str | None:
    """The file's new content (``None``: deleted) after ``patch``, strictly.

    Args:
        patch: The file's hunks.
        content: The current content (``None``: the file does not exist).

    Raises:
        PatchError: The file's existence or any hunk's lines do not match.
    """
    if patch.old_path is None and content is not None:
        raise PatchError(f"{patch.path}: the patch creates it, but it exists")
    if patch.old_path is not None and content is None:
        raise PatchError(f"{patch.path}: the file does not exist")
    lines = (content or "").splitlines(keepends=True)
    out: list[str] = []
    cursor = 0
    for number, hunk in enumerate(patch.hunks, 1):
        # A hunk removing nothing names the line *after which* it inserts.
        start = hunk.old_start - 1 if hunk.old else hunk.old_start
        if start < cursor:
            raise PatchError(f"{patch.path}: hunk {number} overlaps the one before it")
        if lines[start:start + len(hunk.old)] != list(hunk.old):
            raise PatchError(f"{patch.path}: hunk {number} does not apply at line "
                             f"{hunk.old_start} (the file's lines differ)")
        out += lines[cursor:start]
        out += hunk.new
        cursor = start + len(hunk.old)
    out += lines[cursor:]
    if patch.new_path is None:
        if out:
            raise PatchError(f"{patch.path}: the patch deletes it but leaves lines behind")
        return None
    return "".join(out)
