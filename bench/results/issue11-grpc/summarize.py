"""Per-sitting and overall medians of run.sh's JSON files; writes runs.csv (one row per run).

Usage: python summarize.py OUT_DIR
"""

import csv
import glob
import json
import statistics as st
import sys
from pathlib import Path

out = Path(sys.argv[1])
rows = []
for f in sorted(glob.glob(str(out / "s*-*-c*-*.json"))):
    sitting, tree, c, i = Path(f).stem.split("-")
    d = json.loads(Path(f).read_text())
    g, p = d["results"]["grpc"]["median"], d["results"]["inproc"]["median"]
    rows.append({"sitting": sitting[1:], "tree": tree, "commit": d["tree"]["commit"][:10],
                 "c": c[1:], "pair": i, "daemon_cpu_ms": g["cpu_ms_per_step"],
                 "daemon_loop_ms": g["cpu_ms_per_step_by_thread"]["MainThread"],
                 "client_cpu_ms": g["client_cpu_ms_per_step"], "inproc_cpu_ms": p["cpu_ms_per_step"],
                 "cpu_ratio": g["cpu_ms_per_step"] / p["cpu_ms_per_step"],
                 "grpc_steps_s": g["steps_per_s"], "inproc_steps_s": p["steps_per_s"],
                 "steps_ratio": g["steps_per_s"] / p["steps_per_s"]})
with open(Path(__file__).with_name("runs.csv"), "w", newline="") as fh:
    writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
                     for r in rows)


def line(label: str, rs: list[dict]) -> str:
    m = {k: st.median(r[k] for r in rs) for k in ("daemon_cpu_ms", "client_cpu_ms",
                                                  "inproc_cpu_ms", "cpu_ratio", "steps_ratio")}
    return (f"{label:24s} n={len(rs):2d}  daemon {m['daemon_cpu_ms']:.3f}  client "
            f"{m['client_cpu_ms']:.3f}  inproc {m['inproc_cpu_ms']:.3f}  CPU ratio "
            f"{m['cpu_ratio']:.2f} [{min(r['cpu_ratio'] for r in rs):.2f}-"
            f"{max(r['cpu_ratio'] for r in rs):.2f}]  steps/s ratio {m['steps_ratio']:.2f} "
            f"[{min(r['steps_ratio'] for r in rs):.2f}-{max(r['steps_ratio'] for r in rs):.2f}]")


for c in ("16", "1"):
    print(f"C={c}")
    for s in sorted({r["sitting"] for r in rows}):
        for tree in ("base", "after"):
            print(line(f"  sitting {s} {tree}", [r for r in rows if (r["c"], r["sitting"],
                                                                    r["tree"]) == (c, s, tree)]))
    for tree in ("base", "after"):
        print(line(f"  all sittings {tree}", [r for r in rows if (r["c"], r["tree"]) == (c, tree)]))
