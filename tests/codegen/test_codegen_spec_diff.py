"""``python -m codegen.spec_diff`` on a throwaway git repository."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from codegen.spec_diff import main

REPO_ROOT = Path(__file__).resolve().parents[2]
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, env={**os.environ, **_GIT_ENV}
    )


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copytree(REPO_ROOT / "spec", root / "spec")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "spec")
    git(root, "commit", "-q", "-m", "spec")
    return root


def run(repo: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main([*argv, "--repo", str(repo)])
    return code, capsys.readouterr().out


def test_unchanged_spec_is_not_breaking(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run(repo, capsys, "HEAD")
    assert code == 0
    assert "no breaking changes" in report


def test_deleted_field_is_breaking(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    common = repo / "spec" / "proto" / "palyra" / "v1" / "errors.proto"
    text, n = re.subn(r"\n  string message = 2;", "", common.read_text())
    assert n == 1
    common.write_text(text)
    code, report = run(repo, capsys, "HEAD")
    assert code == 1
    assert "**BREAKING**" in report
    assert "ErrorDetail" in report and "message" in report


def test_removed_transition_is_breaking_and_additions_are_listed(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_yaml = repo / "spec" / "lifecycle" / "run.yaml"
    text = run_yaml.read_text()
    text = text.replace("      - {event: approval_resolved, target: in_progress}\n", "")
    run_yaml.write_text(text)
    git(repo, "commit", "-q", "-am", "drop approval_resolved")
    code, report = run(repo, capsys)  # default ref: HEAD~1 when HEAD is main
    assert code == 1
    assert "removed transition `waiting_for_approval --approval_resolved--> in_progress`" in report
    assert "removed event `approval_resolved`" in report


def test_added_state_is_not_breaking(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    approval = repo / "spec" / "lifecycle" / "approval.yaml"
    approval.write_text(
        approval.read_text().replace(
            "      - {event: expire, target: expired}\n",
            "      - {event: expire, target: expired}\n      - {event: revoke, target: revoked}\n",
        )
        + "  revoked:\n    final: true\n"
    )
    code, report = run(repo, capsys, "HEAD")
    assert code == 0, report
    assert "added state `revoked`" in report


def _head(repo: Path) -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()


def _commit_spec_change(repo: Path, message: str) -> None:
    """A non-breaking spec change (a comment), committed."""
    errors = repo / "spec" / "proto" / "palyra" / "v1" / "errors.proto"
    errors.write_text(errors.read_text() + f"// {message}\n")
    git(repo, "commit", "-q", "-am", message)


def test_default_ref_is_the_merge_base_with_local_main(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = _head(repo)
    git(repo, "checkout", "-q", "-b", "feature")
    _commit_spec_change(repo, "one")
    _commit_spec_change(repo, "two")
    code, report = run(repo, capsys)
    assert code == 0, report
    assert f"(`{base[:12]}`)" in report.splitlines()[0]
    assert f"Compared with `{base[:12]}`: the merge base of HEAD and `main`." in report


def test_default_ref_falls_back_to_origin_main(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = _head(repo)
    git(repo, "update-ref", "refs/remotes/origin/main", base)
    git(repo, "checkout", "-q", "-b", "feature")
    git(repo, "branch", "-q", "-D", "main")
    _commit_spec_change(repo, "one")
    _commit_spec_change(repo, "two")
    code, report = run(repo, capsys)
    assert code == 0, report
    assert (f"Compared with `{base[:12]}`: the merge base of HEAD and `origin/main` "
            "(`main` does not exist).") in report


def test_on_main_origin_main_gives_the_unpushed_changes(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pushed = _head(repo)
    git(repo, "update-ref", "refs/remotes/origin/main", pushed)
    _commit_spec_change(repo, "one")
    _commit_spec_change(repo, "two")
    code, report = run(repo, capsys)
    assert code == 0, report
    assert (f"Compared with `{pushed[:12]}`: the merge base of HEAD and `origin/main` "
            "(its merge base with `main` is HEAD itself).") in report


def test_default_ref_falls_back_to_head_parent_then_head(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = run(repo, capsys)  # one commit on main, no origin/main
    assert code == 0, report
    assert (f"Compared with `{_head(repo)[:12]}`: HEAD itself (it has no parent) "
            "(its merge base with `main` is HEAD itself; `origin/main` does not exist).") in report
    parent = _head(repo)
    git(repo, "checkout", "-q", "-b", "feature")
    git(repo, "branch", "-q", "-D", "main")
    _commit_spec_change(repo, "one")
    code, report = run(repo, capsys)
    assert code == 0, report
    assert (f"Compared with `{parent[:12]}`: the parent of HEAD "
            "(`main` does not exist; `origin/main` does not exist).") in report


def test_an_explicit_ref_says_so(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = run(repo, capsys, "HEAD")
    assert code == 0 and "given on the command line." in report
