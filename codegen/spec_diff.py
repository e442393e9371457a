"""``python -m codegen.spec_diff [REF]``: Markdown report of spec changes since REF.

Proto changes are judged by ``buf breaking`` (rules in ``spec/buf.yaml``) against
``.git#ref=<REF>,subdir=spec``; lifecycle changes by a structural diff of the YAML
at REF (``git show``) and in the working tree. Exit status: 0 if nothing breaking,
1 if anything is breaking, 2 if the comparison itself could not run.

REF defaults to ``git merge-base HEAD main``; when that is HEAD itself (working on
main), HEAD~1, or HEAD in a single-commit repository.
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


def default_ref(repo: Path) -> str:
    """Merge base with main; HEAD~1 when that is HEAD; HEAD when there is no parent."""
    head = git(repo, "rev-parse", "HEAD").stdout.strip()
    base = git(repo, "merge-base", "HEAD", "main", check=False)
    if base.returncode == 0 and base.stdout.strip() != head:
        return base.stdout.strip()
    parent = git(repo, "rev-parse", "--verify", "--quiet", "HEAD~1", check=False)
    return "HEAD~1" if parent.returncode == 0 else "HEAD"


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


def build_report(repo: Path, ref: str) -> Report:
    """Run both comparisons against ``ref``."""
    commit = git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}").stdout.strip()
    has_spec = git(repo, "cat-file", "-e", f"{commit}:spec", check=False).returncode == 0
    buf_breaking, buf_output = (
        run_buf(repo, commit) if has_spec else (False, "spec/ did not exist at REF")
    )
    return Report(ref, commit, buf_output, buf_breaking, lifecycle_diffs(repo, commit))


def render(report: Report) -> str:
    """The Markdown report."""
    verdict = "**BREAKING**" if report.breaking else "no breaking changes"
    out = [f"# Spec diff against `{report.ref}` (`{report.commit[:12]}`): {verdict}", ""]
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
        "ref", nargs="?", help="git ref to compare with (default: merge base with main)"
    )
    parser.add_argument(
        "--repo", type=Path, default=REPO_ROOT, help="repository root (default: this repo)"
    )
    args = parser.parse_args(argv)
    try:
        ref = args.ref or default_ref(args.repo)
        report = build_report(args.repo, ref)
    except (ToolError, SpecError) as exc:
        print(f"spec_diff: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(render(report))
    return 1 if report.breaking else 0


if __name__ == "__main__":
    sys.exit(main())
