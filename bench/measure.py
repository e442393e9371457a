"""One measured run of tool-loop: the window, the counters around it, and the figures per step.

A :class:`Subject` is the process that does palyra's work: the harness itself
in process, or the daemon over a transport. Around the measured phase
:func:`measure` opens a perf flush window (bench/flushes.py) and takes two
:func:`bench.probe.snapshot` s of the subject; :func:`figures` turns the
difference into the workload's JSON keys plus the per-step figures of issue
11 item 7. Floors (bench/floors.py) are measured on the same disk just
before the window.
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import floors, probe
from bench.flushes import FlushCount, FlushCounter
from bench.workload import Driver, Tally, dist, drive, pct

BUCKETS = ("event_loop", "journal", "other")


@dataclass
class Subject:
    """The measured process: its pid, how to snapshot it, its storage settings."""

    pid: int
    snapshot: Callable[[], probe.Snapshot]
    storage_effective: dict[str, Any]


def _client_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _children_cpu_s() -> float:
    """CPU seconds of this process's live children (``/proc/<pid>/stat`` utime+stime)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for pid in children:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _loadavg() -> float:
    try:
        with open("/proc/loadavg") as handle:
            return float(handle.read().split()[0])
    except OSError:
        return -1.0


async def measure(driver: Driver, subject: Subject, args: argparse.Namespace, data_dir: Path,
                  transport: str) -> dict[str, Any]:
    """Run N sessions through ``driver`` inside a counted window; return this run's figures."""
    disk = floors.disk_floors(data_dir)
    sha = floors.sha256_mb_s()
    subject.snapshot()  # the first snapshot finds the journal; keep that out of the window
    load_before = _loadavg()
    with FlushCounter(subject.pid) as counter:
        counter.start()
        before = subject.snapshot()
        client_cpu = _client_cpu_s()
        servers = _children_cpu_s()
        start = time.perf_counter()
        tally = await drive(driver, args, args.sessions, "s")
        wall = time.perf_counter() - start
        client_cpu = _client_cpu_s() - client_cpu
        servers = _children_cpu_s() - servers
        after = subject.snapshot()
        flushes = counter.stop()
    window = probe.delta(before, after)
    result = figures(args, transport, tally, wall, window, flushes)
    events = window["journal"].get("appended_events", 0)
    event_bytes = round(window["journal"].get("appended_bytes", 0) / events) if events else 256
    result["floors"] = {**disk, "sha256_mb_s": sha, "event_bytes": event_bytes,
                        "sha256_event_us": floors.event_hash_us(event_bytes)}
    result["derived"] = _derived(result)
    result["storage_effective"] = subject.storage_effective
    result["load_avg_1m"] = {"before": load_before, "after": _loadavg()}
    if subject.pid != os.getpid():
        result["client_cpu_ms_per_step"] = round(client_cpu * 1000 / _steps(args), 3)
    elif servers:
        # Tool servers the measured process started (an MCP server over stdio):
        # their CPU is part of a step's cost.
        result["tool_server_cpu_ms_per_step"] = round(servers * 1000 / _steps(args), 3)
    return result


def _steps(args: argparse.Namespace) -> int:
    return int(args.sessions * args.turns * args.steps)


def _per_step(value: float, steps: int, scale: float = 1.0) -> float:
    return round(value * scale / steps, 4) if steps else 0.0


def _threads(window: dict[str, Any], steps: int, which: str = "threads", total: str = "cpu_s"
             ) -> tuple[dict[str, float], dict[str, float]]:
    """CPU ms/step per bucket (other = process minus the named buckets) and per thread name."""
    by_bucket = dict.fromkeys(BUCKETS, 0.0)
    named: dict[str, float] = {}
    for key, seconds in window[which].items():
        bucket, _, name = key.partition(":")
        by_bucket[bucket] = by_bucket.get(bucket, 0.0) + seconds
        named[name] = _per_step(seconds, steps, 1000)
    # Threads that ended inside the window are only in the process total.
    by_bucket["other"] = max(0.0, window[total] - by_bucket["event_loop"] - by_bucket["journal"])
    return {b: _per_step(s, steps, 1000) for b, s in by_bucket.items()}, named


def _top(counts: dict[str, int], steps: int, n: int = 12) -> dict[str, float]:
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return {name: _per_step(count, steps) for name, count in ranked[:n] if count}


def figures(args: argparse.Namespace, transport: str, tally: Tally, wall: float,
            window: dict[str, Any], flushes: FlushCount) -> dict[str, Any]:
    """The workload's keys and the per-step figures for one window."""
    steps = _steps(args)
    journal = window["journal"]
    events = journal.get("appended_events", 0)
    # JournalStats.records counts stored records (one per session per
    # commit since journal format 2); older stores had one record per event.
    records = journal.get("records", journal.get("appended_records", events))
    commits = journal.get("commits", 0)
    by_bucket, named = _threads(window, steps)
    sys_by_bucket, _ = _threads(window, steps, "threads_sys", "sys_s")
    cpu = window["cpu_s"]
    wchar = window["io"].get("wchar", 0)
    flush_figures: dict[str, Any] = {"counted_by": "perf syscall tracepoints", **flushes.as_dict()}
    if flushes.available:
        flush_figures["per_step"] = _per_step(flushes.total, steps)
        flush_figures["per_commit"] = round(flushes.total / commits, 3) if commits else 0.0
        flush_figures["by_call_per_step"] = {
            k: _per_step(v, steps) for k, v in flushes.by_call.items() if v}
    return {
        "system": "palyra", "workload": "tool-loop", "workload_version": 1,
        "transport": transport, "steps": args.steps, "sessions": args.sessions,
        "concurrency": args.concurrency, "turns": args.turns, "hitl": args.hitl,
        "tool": args.tool, "watch_batch": not getattr(args, "unbatched", False),
        "turns_per_s": round(len(tally.turns) / wall, 3),
        "steps_per_s": round(steps / wall, 3), "wall_s": round(wall, 3),
        "step_latency_ms": dist(tally.steps),
        "p50_step_ms": pct(tally.steps, 50), "p99_step_ms": pct(tally.steps, 99),
        "step_p50_ms_by_index": [pct(tally.by_index.get(i, []), 50) for i in range(args.steps)],
        # A turn's first step (its call to its first tool result) is the step p99's tail
        # over HTTP; ``accept`` is its part up to the turn's first answer.
        "p50_first_step_ms": pct(tally.by_index.get(0, []), 50),
        "p99_first_step_ms": pct(tally.by_index.get(0, []), 99),
        "p50_later_step_ms": pct([s for i, v in tally.by_index.items() if i for s in v], 50),
        "p50_accept_ms": pct(tally.accepts, 50), "p99_accept_ms": pct(tally.accepts, 99),
        "turn_latency_ms": dist(tally.turns),
        "final_answer_latency_ms": dist(tally.finals),
        **({"p50_decide_ms": pct(tally.decides, 50), "p99_decide_ms": pct(tally.decides, 99)}
           if tally.decides else {}),
        "cpu_s": round(cpu, 3), "cpu_util": round(cpu / wall, 3),
        "cpu_ms_per_step": _per_step(cpu, steps, 1000),
        "cpu_ms_per_step_by_bucket": by_bucket,
        "cpu_ms_per_step_by_thread": named,
        "sys_ms_per_step": _per_step(window["sys_s"], steps, 1000),
        "sys_ms_per_step_by_bucket": sys_by_bucket,
        "records_per_step": _per_step(records, steps),
        "events_per_step": _per_step(events, steps),
        "commits_per_step": _per_step(commits, steps),
        "lmdb_txns_per_step": _per_step(journal.get("lmdb_txns", 0), steps),
        "flushes": flush_figures,
        "messages_per_step": _per_step(window["messages"]["total"], steps),
        "gc_ms_per_step": _per_step(sum(window["gc"]["s"]), steps, 1000.0),
        "gc_collections": window["gc"]["n"],
        "gc_frozen_objects": window["gc_frozen"],
        "gc_longest_pause_ms": [round(s * 1000, 2) for s in window.get("gc_longest_s", ())],
        "messages_by_type_per_step": _top(window["messages"]["by_type"], steps),
        "messages_by_thread_per_step": _top(window["messages"]["by_thread"], steps),
        "checkpointer_calls": {"total": commits, "per_step": _per_step(commits, steps)},
        "checkpoint_rows": records, "rows_written": records,
        "rows_per_step": _per_step(records, steps),
        "bytes_written": journal.get("appended_bytes", 0),
        "bytes_per_step": _per_step(journal.get("appended_bytes", 0), steps),
        "proc_io": {"wchar": wchar, "write_bytes": window["io"].get("write_bytes", 0)},
        "wchar_per_step": _per_step(wchar, steps),
        "peak_rss_mib": round(window["mem_mib"].get("VmHWM", 0.0), 1),
        "rss_before_run_mib": round(window["mem_before_mib"].get("VmRSS", 0.0), 1),
        "runs": tally.runs, "approvals": tally.approvals,
        "ok": not tally.failures and len(tally.turns) == args.sessions * args.turns,
        **({"failures": tally.failures[:5]} if tally.failures else {}),
    }


def _derived(result: dict[str, Any]) -> dict[str, float]:
    """Ceilings that follow from the floors and this run's shape (labelled as derived)."""
    out: dict[str, float] = {}
    floor = result["floors"]
    per_step = result["flushes"].get("per_step")
    if per_step:
        out["storage_ceiling_steps_per_s_one_writer"] = round(
            1e6 / (floor["fdatasync_p50_us"] * per_step), 1)
    events = result["events_per_step"]
    if events:
        out["hash_ms_per_step"] = round(events * floor["sha256_event_us"] / 1000, 4)
    return out
