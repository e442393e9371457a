"""CLI: ``python -m codegen [--check] [--spec DIR] [--out DIR]``.

Exit status: 0 on success, 1 on a spec problem, a tool failure, or (with
``--check``) any drift between ``--out`` and a fresh generation.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from codegen.diagnostics import CodegenError, SpecError
from codegen.drift import unexpected_files
from codegen.layout import REPO_ROOT
from codegen.pipeline import check, generate


def _drift_message(diff: str, out: Path, spec: Path) -> str:
    """One line saying what is wrong: stray files, or code that differs from the spec."""
    stray = unexpected_files(diff)
    changed = sum(1 for line in diff.splitlines() if line.startswith("+++ "))
    if stray and not changed:
        return (f"codegen: {out} holds {len(stray)} file(s) codegen does not write: "
                f"{', '.join(stray)}; delete them (generated/ is codegen's alone; `npm pack` "
                "to another directory)")
    message = f"codegen: {out} is out of date with {spec}; run `python -m codegen`"
    return message + (f" (and delete {', '.join(stray)})" if stray else "")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the generator; returns the process exit status."""
    parser = argparse.ArgumentParser(prog="python -m codegen", description=__doc__)
    parser.add_argument(
        "--check",
        action="store_true",
        help="fail (exit 1) if --out differs from a fresh generation",
    )
    parser.add_argument(
        "--spec", type=Path, default=REPO_ROOT / "spec", help="spec root (default: spec/)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO_ROOT / "generated",
        help="output root (default: generated/)",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        if args.check:
            diff = check(args.spec, args.out)
            if diff:
                sys.stdout.write(diff)
                print(_drift_message(diff, args.out, args.spec), file=sys.stderr)
                return 1
            print(f"codegen: {args.out} is up to date ({time.monotonic() - started:.1f}s)")
            return 0
        count = generate(args.spec, args.out)
    except SpecError as exc:
        print("codegen: the spec is inconsistent:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    except CodegenError as exc:
        print(f"codegen: {exc}", file=sys.stderr)
        return 1
    print(f"codegen: wrote {count} files under {args.out} ({time.monotonic() - started:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
