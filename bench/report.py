"""Medians over repeats, the readable table, and the JSON file a later session diffs.

:func:`median_tree` takes the per-run figure dicts of one configuration and
returns one dict of the same shape holding each number's median (lists
element-wise; ``ok`` only if every run was ok). :func:`table` renders the
figures issue 11 tracks, median with min and max across repeats.
"""

from __future__ import annotations

import json
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parents[1]


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def median_tree(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each numeric leaf's median across ``runs`` (keys missing from a run are skipped)."""
    out: dict[str, Any] = {}
    keys: list[str] = []
    for run in runs:
        keys += [k for k in run if k not in keys]
    for key in keys:
        values = [run[key] for run in runs if key in run]
        first = values[0]
        if key == "ok":
            out[key] = all(values)
        elif all(is_number(v) for v in values):
            out[key] = round(statistics.median(values), 4)
        elif all(isinstance(v, dict) for v in values):
            out[key] = median_tree(values)
        elif (all(isinstance(v, list) for v in values) and len({len(v) for v in values}) == 1
              and all(is_number(x) for v in values for x in v)):
            out[key] = [round(statistics.median(col), 4) for col in zip(*values, strict=True)]
        else:
            out[key] = first
    return out


def get(figures: dict[str, Any], path: str) -> Any:
    value: Any = figures
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


# label, dotted key, format
ROWS: list[tuple[str, str, str]] = [
    ("steps/s", "steps_per_s", "{:.1f}"),
    ("step latency p50 ms", "p50_step_ms", "{:.2f}"),
    ("step latency p99 ms", "p99_step_ms", "{:.2f}"),
    ("  a turn's first step p50 ms", "p50_first_step_ms", "{:.2f}"),
    ("  a turn's first step p99 ms", "p99_first_step_ms", "{:.2f}"),
    ("    of which to the first answer p50 ms", "p50_accept_ms", "{:.2f}"),
    ("    of which to the first answer p99 ms", "p99_accept_ms", "{:.2f}"),
    ("  later steps p50 ms", "p50_later_step_ms", "{:.2f}"),
    ("approval decide → durable answer p50 ms", "p50_decide_ms", "{:.2f}"),
    ("approval decide → durable answer p99 ms", "p99_decide_ms", "{:.2f}"),
    ("CPU ms/step, process", "cpu_ms_per_step", "{:.3f}"),
    ("  event-loop thread", "cpu_ms_per_step_by_bucket.event_loop", "{:.3f}"),
    ("  journal thread(s)", "cpu_ms_per_step_by_bucket.journal", "{:.3f}"),
    ("  other threads", "cpu_ms_per_step_by_bucket.other", "{:.3f}"),
    ("  of which in the kernel (sys)", "sys_ms_per_step", "{:.3f}"),
    ("  journal thread(s) in the kernel", "sys_ms_per_step_by_bucket.journal", "{:.3f}"),
    ("CPU ms/step, client (separate process)", "client_cpu_ms_per_step", "{:.3f}"),
    ("CPU ms/step, tool server (MCP child)", "tool_server_cpu_ms_per_step", "{:.3f}"),
    ("CPU ms/step, PostgreSQL server", "postgres_cpu_ms_per_step", "{:.3f}"),
    ("PostgreSQL transactions/step (pg_stat_database)", "pg_transactions_per_step", "{:.2f}"),
    ("CPU utilisation (cores)", "cpu_util", "{:.2f}"),
    ("journal records/step", "records_per_step", "{:.2f}"),
    ("journal events/step", "events_per_step", "{:.2f}"),
    ("journal commits/step", "commits_per_step", "{:.3f}"),
    ("LMDB write txns/step", "lmdb_txns_per_step", "{:.3f}"),
    ("device flushes/step (counted)", "flushes.per_step", "{:.3f}"),
    ("device flushes/commit", "flushes.per_commit", "{:.3f}"),
    ("betterproto2 messages/step", "messages_per_step", "{:.2f}"),
    ("CPU ms/step in the garbage collector", "gc_ms_per_step", "{:.3f}"),
    ("journal bytes/step", "bytes_per_step", "{:.0f}"),
    ("write() bytes/step", "wchar_per_step", "{:.0f}"),
    ("floor: write+fdatasync p50 µs", "floors.fdatasync_p50_us", "{:.0f}"),
    ("floor: write+fdatasync p90 µs", "floors.fdatasync_p90_us", "{:.0f}"),
    ("floor: O_DSYNC 4 KiB write p50 µs", "floors.dsync_write_p50_us", "{:.0f}"),
    ("floor: SHA-256 MB/s", "floors.sha256_mb_s", "{:.0f}"),
    ("floor: hash µs/event (event + link)", "floors.sha256_event_us", "{:.2f}"),
    ("derived: hash ms/step", "derived.hash_ms_per_step", "{:.3f}"),
    ("derived: one-writer flush ceiling steps/s", "derived.storage_ceiling_steps_per_s_one_writer",
     "{:.0f}"),
    ("peak RSS MiB", "peak_rss_mib", "{:.1f}"),
    ("daemon idle RSS MiB (started, before any run)", "idle_rss_mib", "{:.1f}"),
    ("daemon RSS MiB after the warm-up", "warm_rss_mib", "{:.1f}"),
]


def _fmt(fmt: str, value: Any) -> str:
    return fmt.format(value) if is_number(value) else "-"


def _inline(counts: dict[str, float] | None, n: int) -> str:
    if not counts:
        return "-"
    return ", ".join(f"{k} {v:.2f}" for k, v in list(counts.items())[:n])


def table(title: str, median: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    """The tracked figures as text: median, min and max across repeats."""
    lines = [title, f"{'figure':<44}{'median':>11}{'min':>11}{'max':>11}"]
    for label, path, fmt in ROWS:
        value = get(median, path)
        if value is None:
            continue
        seen = [v for v in (get(r, path) for r in runs) if is_number(v)]
        low, high = (min(seen), max(seen)) if seen else (None, None)
        lines.append(f"{label:<44}{_fmt(fmt, value):>11}{_fmt(fmt, low):>11}{_fmt(fmt, high):>11}")
    flushes = median.get("flushes", {})
    if flushes.get("available"):
        lines.append(f"  flushes by call/step: {_inline(flushes.get('by_call_per_step'), 8)}"
                     f"  (O_DSYNC: {', '.join(Path(f).name for f in flushes.get('dsync_files', [])) or 'none'})")
    else:
        lines.append(f"  device flushes not counted: {flushes.get('reason', 'unknown')}")
    lines.append(f"  messages by type/step: {_inline(median.get('messages_by_type_per_step'), 8)}")
    lines.append(f"  messages by thread/step: "
                 f"{_inline(median.get('messages_by_thread_per_step'), 4)}")
    lines.append(f"  CPU ms/step by thread: {_inline(median.get('cpu_ms_per_step_by_thread'), 6)}")
    if median.get("gc_collections"):
        lines.append("  garbage collections (generation 0, 1, 2): "
                     + ", ".join(str(round(n)) for n in median["gc_collections"])
                     + "; longest pause ms: "
                     + ", ".join(f"{ms:.1f}" for ms in median.get("gc_longest_pause_ms") or ()))
    for name, value in (median.get("daemon_settings") or {}).items():
        lines.append(f"  daemon setting: {name} = {value}")
    load = [r.get("load_avg_1m", {}) for r in runs]
    lines.append("  1-min load average before→after each run: "
                 + ", ".join(f"{x.get('before', 0):.2f}→{x.get('after', 0):.2f}" for x in load))
    lines.append(f"  ok: {median.get('ok')}" + (f"  failures: {runs[0].get('failures')}"
                                                 if not median.get("ok") else ""))
    return "\n".join(lines)


def comparison(wire: dict[str, Any], inproc: dict[str, Any]) -> dict[str, float]:
    """Transport over in-process ratios of the medians (the same sitting)."""
    def ratio(path: str, over: Callable[[dict[str, Any]], Any] | None = None) -> float:
        a = get(wire, path) if over is None else over(wire)
        b = get(inproc, path)
        return round(a / b, 3) if is_number(a) and is_number(b) and b else 0.0

    return {
        "cpu_ms_per_step_ratio": ratio("cpu_ms_per_step"),
        "cpu_ms_per_step_with_client_ratio": ratio(
            "cpu_ms_per_step",
            lambda w: w["cpu_ms_per_step"] + w.get("client_cpu_ms_per_step", 0.0)),
        "event_loop_cpu_ratio": ratio("cpu_ms_per_step_by_bucket.event_loop"),
        "steps_per_s_ratio": ratio("steps_per_s"),
        "p50_step_ratio": ratio("p50_step_ms"),
        "messages_per_step_ratio": ratio("messages_per_step"),
    }


def ops_overhead(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per instrumented mode, against the plain in-process run, as overhead percentages
    (positive: slower / more CPU): of the medians, and the median of the per-repeat
    ratios (each instrumented run against the plain run of its own repeat, which
    cancels the load drifting between repeats)."""
    base = results["inproc"]
    out: dict[str, dict[str, float]] = {}
    for kind, result in results.items():
        if kind == "inproc":
            continue
        median, off = result["median"], base["median"]
        pairs = list(zip(result["runs"], base["runs"], strict=False))
        out[kind] = {
            "steps_per_s": median["steps_per_s"], "steps_per_s_off": off["steps_per_s"],
            "throughput_overhead_pct": _overhead(off["steps_per_s"], median["steps_per_s"]),
            "cpu_overhead_pct": _overhead(median["cpu_ms_per_step"], off["cpu_ms_per_step"]),
            "paired_throughput_overhead_pct": statistics.median(
                _overhead(b["steps_per_s"], r["steps_per_s"]) for r, b in pairs),
            "paired_cpu_overhead_pct": statistics.median(
                _overhead(r["cpu_ms_per_step"], b["cpu_ms_per_step"]) for r, b in pairs),
        }
        exporter = [r["ops"]["exporter_cpu_ms"] / (r["steps"] * r["sessions"] * r["turns"])
                    for r in result["runs"] if "exporter_cpu_ms" in r.get("ops", {})]
        if exporter:  # tracing's CPU outside the daemon's process
            out[kind]["exporter_cpu_ms_per_step"] = round(statistics.median(exporter), 3)
        direct = [_metrics_direct_ms_per_step(r) for r in result["runs"]
                  if "fold_us_per_event" in r.get("ops", {})]
        if direct:  # the fold's and the scrapes' own CPU: what the noise of a loaded host hides
            out[kind]["metrics_cpu_ms_per_step"] = round(statistics.median(direct), 4)
            out[kind]["metrics_cpu_pct"] = round(
                statistics.median(direct) / off["cpu_ms_per_step"] * 100, 2)
        clocked = [_metrics_in_run(r) for r in result["runs"]
                   if "in_run_fold_ms" in r.get("ops", {})]
        if clocked:  # the same work clocked in place, as a share of that run's own CPU
            out[kind]["metrics_in_run_ms_per_step"] = round(
                statistics.median(ms for ms, _pct in clocked), 4)
            out[kind]["metrics_in_run_pct"] = round(
                statistics.median(pct for _ms, pct in clocked), 2)
    return out


def _metrics_in_run(run: dict[str, Any]) -> tuple[float, float]:
    """The fold's and the scrapes' CPU clocked inside ``run`` (``bench.ops.ClockedMetrics``):
    ms per step, and percent of that run's CPU per step."""
    o, steps = run["ops"], run["steps"] * run["sessions"] * run["turns"]
    ms = (o["in_run_fold_ms"] + o["in_run_scrape_ms"]) / steps
    return ms, ms / run["cpu_ms_per_step"] * 100


def _metrics_direct_ms_per_step(run: dict[str, Any]) -> float:
    """The fold's CPU per step (µs per event times events) plus the scrapes' (one per second
    of the run), from the timings ``bench.ops.direct_cost`` took apart from the run."""
    o, steps = run["ops"], run["steps"] * run["sessions"] * run["turns"]
    fold_ms = o["fold_us_per_event"] * o["events"] / 1000
    scrapes = run["wall_s"] / 1.0 + 1  # bench.ops.SCRAPE_EVERY_S, and the last one
    return float((fold_ms + o["scrape_ms"] * scrapes) / steps)


def _overhead(more: float, less: float) -> float:
    """``more / less - 1`` in percent (0 when ``less`` is 0)."""
    return round((more / less - 1) * 100, 2) if less else 0.0


# --compare-tools: each tool's target, as a multiple of the built-in add's CPU per step.
TOOL_TARGETS = {"mcp": 2.0, "skill": 1.3}


def tool_ratios(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per tool of ``--compare-tools``, its CPU per step against the built-in ``add``'s:
    the ratio of the medians, and the median of the per-repeat ratios (each run
    against the add run of its own repeat, which cancels the load drifting)."""
    base = results["tool:add"]
    out: dict[str, dict[str, float]] = {}
    for kind, result in results.items():
        if kind == "tool:add":
            continue
        tool = kind.removeprefix("tool:")
        median, add = result["median"], base["median"]
        pairs = list(zip(result["runs"], base["runs"], strict=False))
        loop = "cpu_ms_per_step_by_bucket.event_loop"
        out[tool] = {
            "cpu_ms_per_step": median["cpu_ms_per_step"],
            "add_cpu_ms_per_step": add["cpu_ms_per_step"],
            "cpu_ratio": round(median["cpu_ms_per_step"] / add["cpu_ms_per_step"], 3),
            "paired_cpu_ratio": round(statistics.median(
                r["cpu_ms_per_step"] / b["cpu_ms_per_step"] for r, b in pairs), 3),
            "event_loop_cpu_ratio": round(get(median, loop) / get(add, loop), 3),
            "tool_server_cpu_ms_per_step": median.get("tool_server_cpu_ms_per_step", 0.0),
            "steps_per_s": median["steps_per_s"], "add_steps_per_s": add["steps_per_s"],
            "target_ratio": TOOL_TARGETS.get(tool, 0.0),
        }
    return out


def tool_ratios_text(ratios: dict[str, dict[str, float]]) -> str:
    """The block printed after the tables of ``--compare-tools``."""
    lines = ["tool step cost against the built-in add, same sitting (daemon CPU per step)"]
    for tool, r in ratios.items():
        target = f" (target <= {r['target_ratio']:g}x)" if r["target_ratio"] else ""
        lines.append(
            f"  {tool}: {r['cpu_ms_per_step']:.3f} / {r['add_cpu_ms_per_step']:.3f} CPU ms/step "
            f"= {r['cpu_ratio']:.2f}x{target}; per repeat (median of pairs) "
            f"{r['paired_cpu_ratio']:.2f}x; event-loop thread {r['event_loop_cpu_ratio']:.2f}x; "
            f"steps/s {r['steps_per_s']:.1f} vs {r['add_steps_per_s']:.1f}"
            + (f"; beside it, the MCP server's process {r['tool_server_cpu_ms_per_step']:.3f} "
               "CPU ms/step" if tool == "mcp" else ""))
    return "\n".join(lines)


def ops_overhead_text(overhead: dict[str, dict[str, float]]) -> str:
    """The overhead block printed after the three tables."""
    lines = ["operations overhead, same sitting (medians; targets: metrics < 2 %, "
             "tracing at 100 % sampling < 5 %)"]
    for kind, o in overhead.items():
        lines.append(f"  {kind}: {o['steps_per_s']:.1f} vs {o['steps_per_s_off']:.1f} steps/s "
                     f"= {o['throughput_overhead_pct']:+.2f} % throughput, "
                     f"{o['cpu_overhead_pct']:+.2f} % CPU/step; per repeat (median of "
                     f"pairs): {o['paired_throughput_overhead_pct']:+.2f} % throughput, "
                     f"{o['paired_cpu_overhead_pct']:+.2f} % CPU/step")
        if "metrics_cpu_ms_per_step" in o:
            lines.append(f"    the fold and the scrapes themselves (timed apart, best of 5): "
                         f"{o['metrics_cpu_ms_per_step']:.4f} CPU ms/step = "
                         f"{o['metrics_cpu_pct']:.2f} % of the plain run's CPU/step")
        if "metrics_in_run_ms_per_step" in o:
            lines.append(f"    the same, clocked inside the run (thread CPU around each fold and "
                         f"scrape): {o['metrics_in_run_ms_per_step']:.4f} CPU ms/step = "
                         f"{o['metrics_in_run_pct']:.2f} % of that run's CPU/step")
        if "exporter_cpu_ms_per_step" in o:
            lines.append(f"    beside it, the exporter process: {o['exporter_cpu_ms_per_step']:.3f} "
                         "CPU ms/step (its own core when one is free)")
    return "\n".join(lines)


def comparison_text(wire_name: str, wire: dict[str, Any], inproc: dict[str, Any],
                    ratios: dict[str, float]) -> str:
    """The ratio block printed after the two tables."""
    client = wire.get("client_cpu_ms_per_step", 0.0)
    return "\n".join([
        f"{wire_name} vs in process, same sitting (medians)",
        f"  CPU ms/step: daemon {wire['cpu_ms_per_step']:.3f} / in process "
        f"{inproc['cpu_ms_per_step']:.3f} = {ratios['cpu_ms_per_step_ratio']:.2f}x"
        f"   (daemon + client {wire['cpu_ms_per_step'] + client:.3f} = "
        f"{ratios['cpu_ms_per_step_with_client_ratio']:.2f}x)",
        f"  event-loop thread CPU: {ratios['event_loop_cpu_ratio']:.2f}x",
        f"  steps/s: {wire['steps_per_s']:.1f} / {inproc['steps_per_s']:.1f} = "
        f"{ratios['steps_per_s_ratio']:.2f}x",
        f"  step p50: {ratios['p50_step_ratio']:.2f}x   messages/step: "
        f"{ratios['messages_per_step_ratio']:.2f}x",
    ])


def tree_info() -> dict[str, Any]:
    """Which code was measured: commit, branch, whether the tree had local changes."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=_REPO, capture_output=True, text=True,
                                  timeout=10, check=False).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"commit": git("rev-parse", "HEAD"), "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def host_info() -> dict[str, Any]:
    """The machine and interpreter the figures belong to."""
    import os

    return {"python": sys.version.split()[0], "platform": platform.platform(),
            "cpus": os.cpu_count()}


def write_json(path: str, document: dict[str, Any]) -> None:
    """Write ``document`` to ``path`` (``-`` for stdout)."""
    text = json.dumps(document, indent=1, sort_keys=False)
    if path == "-":
        print(text)
    else:
        Path(path).write_text(text + "\n")
