"""fs.apply_patch: unified diffs from difflib and git applied exactly, all or nothing."""

from __future__ import annotations

import difflib
import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palyra.tools import ToolContext, ToolsConfig, attest, default_registry
from palyra.tools._patch import PatchError, apply_file, parse_patch

REGISTRY = default_registry(ToolsConfig())
_LINES = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "-- x\n", "+++ y\n", "\n", "d"]),
                  max_size=12).map(lambda ls: [ln if ln.endswith("\n") else ln + "\n"
                                               for ln in ls])


def _diff(before: str, after: str, path: str = "f.txt") -> str:
    lines = difflib.unified_diff(before.splitlines(keepends=True),
                                 after.splitlines(keepends=True), f"a/{path}", f"b/{path}")
    return "".join(lines)


@settings(max_examples=300, deadline=None)
@given(_LINES, _LINES)
def test_difflib_diffs_apply_back_exactly(before: list[str], after: list[str]) -> None:
    old, new = "".join(before), "".join(after)
    diff = _diff(old, new)
    if not diff:
        return
    [patch] = parse_patch(diff)
    assert apply_file(patch, old) == new


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def _call(ctx: ToolContext, patch: str) -> Any:
    return await REGISTRY.execute("fs.apply_patch", {"patch": patch}, ctx)


def _git_diff(tmp: Path, old: dict[str, str | None], new: dict[str, str | None]) -> str:
    """What ``git diff --no-index`` says between two trees (the oracle's diff)."""
    for side, files in (("a", old), ("b", new)):
        (tmp / side).mkdir(parents=True)
        for name, text in files.items():
            if text is not None:
                (tmp / side / name).parent.mkdir(parents=True, exist_ok=True)
                (tmp / side / name).write_text(text)
    done = subprocess.run(["git", "diff", "--no-index", "--no-prefix", "a", "b"], cwd=tmp,
                          capture_output=True, text=True, check=False)
    # --no-prefix keeps the tree names: make the paths workspace-relative as git does.
    return done.stdout.replace("--- a/", "--- ").replace("+++ b/", "+++ ")


async def test_a_git_diff_creates_changes_and_deletes(workspace: Path, ctx: ToolContext,
                                                      tmp_path: Path) -> None:
    old = {"notes.txt": "hello notes\nline two\n", "gone.txt": "bye\n", "new/x.py": None}
    new = {"notes.txt": "hello notes\nline 2\nline three", "gone.txt": None,
           "new/x.py": "print(1)\n"}
    (workspace / "notes.txt").write_text(old["notes.txt"] or "")
    (workspace / "gone.txt").write_text("bye\n")
    diff = _git_diff(tmp_path / "oracle", old, new)
    result = await _call(ctx, diff)
    assert result.success, result.error
    assert (workspace / "notes.txt").read_text() == new["notes.txt"]
    assert (workspace / "new/x.py").read_text() == "print(1)\n"
    assert not (workspace / "gone.txt").exists()
    files = {f["path"]: f for f in msgspec.json.decode(result.output_json)["files"]}
    assert files["notes.txt"]["before_sha256"] == _sha(b"hello notes\nline two\n")
    assert files["notes.txt"]["after_sha256"] == _sha(new["notes.txt"].encode())  # type: ignore[union-attr]
    assert files["gone.txt"]["after_sha256"] == "" and files["new/x.py"]["before_sha256"] == ""
    assert result.facts["patch:notes.txt"] == (
        f"{files['notes.txt']['before_sha256']}:{files['notes.txt']['after_sha256']}")
    # The facts are covered by the attestation hash.
    forged = msgspec.structs.replace(result, facts={**result.facts, "patch:notes.txt": "x:y"})
    assert attest("fs.apply_patch", "{}", result) != attest("fs.apply_patch", "{}", forged)


async def test_a_patch_that_does_not_apply_changes_nothing(workspace: Path,
                                                           ctx: ToolContext) -> None:
    (workspace / "one.txt").write_text("1\n2\n3\n")
    (workspace / "two.txt").write_text("x\n")
    good = _diff("1\n2\n3\n", "1\nTWO\n3\n", "one.txt")
    stale = _diff("y\n", "z\n", "two.txt")  # made against another version of two.txt
    result = await _call(ctx, good + stale)
    assert not result.success and "hunk 1 does not apply" in result.error
    assert (workspace / "one.txt").read_text() == "1\n2\n3\n"  # the first file untouched too
    assert (workspace / "two.txt").read_text() == "x\n"
    assert sorted(os.listdir(workspace)) == [".git", "notes.txt", "one.txt",
                                              "sub", "two.txt"]


@pytest.mark.parametrize(("patch", "problem"), [
    ("just prose", "not a unified diff"),
    ("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-x\n", "ends early"),
    ("--- a/f\n+++ b/f\n", "has no hunks"),
    ("--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+x\n", "both sides"),
])
def test_malformed_patches_are_refused(patch: str, problem: str) -> None:
    with pytest.raises(PatchError, match=problem):
        parse_patch(patch)


@pytest.mark.parametrize("path", ["../outside.txt", ".git/config", "sub/../../outside.txt"])
async def test_paths_stay_in_the_workspace(ctx: ToolContext, path: str, tmp_path: Path) -> None:
    result = await _call(ctx, _diff("secret", "owned", path))
    assert not result.success
    assert (tmp_path / "outside.txt").read_text() == "secret"


async def test_creating_an_existing_file_is_refused(workspace: Path, ctx: ToolContext) -> None:
    result = await _call(ctx, "--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1 @@\n+x\n")
    assert not result.success and "exists" in result.error
    assert (workspace / "notes.txt").read_text() == "hello notes"
