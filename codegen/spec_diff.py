"""``python -m codegen.spec_diff [REF]``: Markdown report of spec changes since REF.

Proto changes are judged by ``buf breaking`` (rules in ``spec/buf.yaml``) against
``.git#ref=<REF>,subdir=spec``; lifecycle changes by a structural diff of the YAML
at REF (``git show``) and in the working tree. Exit status: 0 if nothing breaking,
1 if anything is breaking, 2 if the comparison itself could not run.

REF defaults to the merge base of HEAD with the first of ``main`` and ``origin/main``
that exists and whose merge base is not HEAD itself (e.g. when working on main);
failing both, HEAD~1, or HEAD in a single-commit repository. The report names the
ref it chose and why.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from codegen.diagnostics import SpecError, ToolError
from codegen.layout import REPO_ROOT, venv_tool
from codegen.lifecycle_diff import LifecycleDiff, diff_lifecycles
from codegen.lifecycle_model import Lifecycle, load_lifecycle

LIFECYCLE_DIR = "spec/lifecycle"


@dataclass
class Report:
    """Everything the Markdown report shows."""

    ref: str
    commit: str
    buf_output: str
    buf_breaking: bool
    lifecycles: list[LifecycleDiff]
    why: str = ""  # how REF was chosen

    @property
    def breaking(self) -> bool:
        """True when any proto or lifecycle change is breaking."""
        return self.buf_breaking or any(d.breaking for d in self.lifecycles)


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run git in ``repo``; raise ``ToolError`` on failure when ``check``."""
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise ToolError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


BASE_BRANCHES = ("main", "origin/main")


def default_ref(repo: Path) -> tuple[str, str]:
    """``(ref, why)``: the merge base with ``main``, else with ``origin/main``, else
    HEAD~1, else HEAD; ``why`` says which was chosen and why the earlier ones were not."""
    head = git(repo, "rev-parse", "HEAD").stdout.strip()
    skipped: list[str] = []
    for branch in BASE_BRANCHES:
        if git(repo, "rev-parse", "--verify", "--quiet", f"{branch}^{{commit}}",
               check=False).returncode != 0:
            skipped.append(f"`{branch}` does not exist")
            continue
        base = git(repo, "merge-base", "HEAD", branch, check=False)
        if base.returncode != 0:
            skipped.append(f"HEAD and `{branch}` have no common ancestor")
        elif base.stdout.strip() == head:
            skipped.append(f"its merge base with `{branch}` is HEAD itself")
        else:
            return base.stdout.strip(), _why(f"the merge base of HEAD and `{branch}`", skipped)
    parent = git(repo, "rev-parse", "--verify", "--quiet", "HEAD~1", check=False)
    if parent.returncode == 0:
        return "HEAD~1", _why("the parent of HEAD", skipped)
    return "HEAD", _why("HEAD itself (it has no parent)", skipped)


def _why(chosen: str, skipped: list[str]) -> str:
    return chosen + (f" ({'; '.join(skipped)})" if skipped else "")


def run_buf(repo: Path, commit: str) -> tuple[bool, str]:
    """``buf breaking`` of the working-tree spec against ``commit``: (breaking, output)."""
    cmd = [venv_tool("buf"), "breaking", "spec", "--against", f".git#ref={commit},subdir=spec"]
    proc = subprocess.run(cmd, cwd=repo, capture_output=True, text=True)
    output = (proc.stdout + proc.stderr).strip()
    if proc.returncode == 0:
        return False, output
    # buf exits 100 for breaking changes; anything else means it could not compare.
    if proc.returncode != 100:
        raise ToolError(f"buf breaking failed (exit {proc.returncode}):\n{output}")
    return True, output


def _old_lifecycle(repo: Path, commit: str, name: str) -> Lifecycle | None:
    shown = git(repo, "show", f"{commit}:{LIFECYCLE_DIR}/{name}", check=False)
    if shown.returncode != 0:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text(shown.stdout, encoding="utf-8")
        return load_lifecycle(path, f"{LIFECYCLE_DIR}/{name}@{commit[:12]}")


def lifecycle_diffs(repo: Path, commit: str) -> list[LifecycleDiff]:
    """Per-lifecycle diffs between ``commit`` and the working tree."""
    listed = git(repo, "ls-tree", "--name-only", f"{commit}:{LIFECYCLE_DIR}", check=False)
    old_names = set(listed.stdout.split()) if listed.returncode == 0 else set()
    new_dir = repo / LIFECYCLE_DIR
    new_names = {p.name for p in new_dir.glob("*.yaml")}
    diffs = []
    for name in sorted(n for n in old_names | new_names if n.endswith(".yaml")):
        old = _old_lifecycle(repo, commit, name) if name in old_names else None
        new = (
            load_lifecycle(new_dir / name, f"{LIFECYCLE_DIR}/{name}") if name in new_names else None
        )
        diffs.append(diff_lifecycles(name.removesuffix(".yaml"), old, new))
    return diffs


def build_report(repo: Path, ref: str, why: str = "") -> Report:
    """Run both comparisons against ``ref`` (``why``: how it was chosen, for the report)."""
    commit = git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}").stdout.strip()
    has_spec = git(repo, "cat-file", "-e", f"{commit}:spec", check=False).returncode == 0
    buf_breaking, buf_output = (
        run_buf(repo, commit) if has_spec else (False, "spec/ did not exist at REF")
    )
    return Report(ref, commit, buf_output, buf_breaking, lifecycle_diffs(repo, commit), why)


def render(report: Report) -> str:
    """The Markdown report."""
    verdict = "**BREAKING**" if report.breaking else "no breaking changes"
    out = [f"# Spec diff against `{report.ref}` (`{report.commit[:12]}`): {verdict}", ""]
    if report.why:
        out += [f"Compared with `{report.commit[:12]}`: {report.why}.", ""]
    out += ["## Protobuf (`buf breaking`)", ""]
    if report.buf_breaking:
        out += ["Breaking changes:", "", "```", report.buf_output, "```"]
    else:
        out.append(report.buf_output or "No breaking changes.")
    out += ["", "## Lifecycles", ""]
    changed = [d for d in report.lifecycles if not d.empty]
    if not changed:
        out.append("No lifecycle changes.")
    for d in changed:
        out += [f"### `{d.name}`{' — BREAKING' if d.breaking else ''}", ""]
        out += [f"- added {item}" for item in d.added]
        out += [f"- removed {item}" for item in d.removed]
        out += [f"- changed: {item}" for item in d.changed]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m codegen.spec_diff", description=__doc__)
    parser.add_argument(
        "ref", nargs="?",
        help="git ref to compare with (default: merge base with main, else origin/main, "
        "else HEAD~1)",
    )
    parser.add_argument(
        "--repo", type=Path, default=REPO_ROOT, help="repository root (default: this repo)"
    )
    args = parser.parse_args(argv)
    try:
        ref, why = (args.ref, "given on the command line") if args.ref else default_ref(args.repo)
        report = build_report(args.repo, ref, why)
    except (ToolError, SpecError) as exc:
        print(f"spec_diff: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(render(report))
    return 1 if report.breaking else 0


if __name__ == "__main__":
    sys.exit(main())
