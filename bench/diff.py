"""``python -m bench diff BEFORE.json AFTER.json``: the tracked figures of two tool-loop runs side by side.

Both files come from ``python -m bench tool-loop --json``. For every
configuration in both (inproc, grpc, http), each row of the table shows the two
medians and after ÷ before. A row is shown only when both files have the figure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.report import ROWS, get, is_number


def _label(document: dict[str, Any]) -> str:
    args, tree = document["args"], document["tree"]
    return (f"{tree['commit'][:10]}{'+dirty' if tree['dirty'] else ''} "
            f"N={args['sessions']} K={args['steps']} C={args['concurrency']}"
            f"{' HITL' if args['hitl'] else ''}")


def render(before: dict[str, Any], after: dict[str, Any]) -> str:
    """Text: one block per configuration both documents measured."""
    out = [f"before: {_label(before)}", f"after:  {_label(after)}"]
    for kind in before["results"]:
        if kind not in after["results"]:
            continue
        old, new = before["results"][kind]["median"], after["results"][kind]["median"]
        out += ["", f"{kind}", f"{'figure':<44}{'before':>11}{'after':>11}{'after/before':>14}"]
        for label, path, fmt in ROWS:
            a, b = get(old, path), get(new, path)
            if not (is_number(a) and is_number(b)):
                continue
            ratio = f"{b / a:.2f}x" if a else "-"
            out.append(f"{label:<44}{fmt.format(a):>11}{fmt.format(b):>11}{ratio:>14}")
    for document, name in ((before, "before"), (after, "after")):
        if "comparison" in document:
            ratios = document["comparison"]
            out.append(f"{name}: transport ÷ in-process CPU/step "
                       f"{ratios['cpu_ms_per_step_ratio']:.2f}x, steps/s "
                       f"{ratios['steps_per_s_ratio']:.2f}x")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    parser = argparse.ArgumentParser(prog="python -m bench diff", description=__doc__)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    print(render(json.loads(args.before.read_text()), json.loads(args.after.read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
