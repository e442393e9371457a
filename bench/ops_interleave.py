"""``--ops interleave``: metrics on and off in short blocks of one run, on one daemon.

Runs of a second or more swing by tens of percent on a shared machine (other
processes come and go), which hides a 2 % effect between whole runs however many
are taken. Here one in-process daemon runs many short blocks of the tool loop,
the metrics tapped on in half of them (in the order off, on, on, off, ... so a
drift in the load falls on both alike) and scraped every ``SCRAPE_EVERY_S`` while
on. Each block's wall time and the process's CPU time (every thread: the fold
runs on the journal writer's) are summed per mode; the overhead is the ratio of
the sums, and the median of the ratios of neighbouring blocks beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bench.inproc import InProcessDriver, in_process
from bench.ops import SCRAPE_EVERY_S
from bench.workload import drive
from palyra.ops.metrics import DaemonMetrics, MetricSources

PATTERN = (False, True, True, False)  # ABBA: a linear drift in the load costs both modes alike


class SwitchedMetrics(DaemonMetrics):
    """The daemon's metrics, its commit tap switched on and off between blocks (no clock
    around the fold: its own system calls would be counted as the metrics' cost)."""

    def off(self) -> None:
        """Stop folding (what commits now is not counted)."""
        self._sources.store.untap(self._tap)

    def on(self) -> None:
        """Fold every commit from now on, as the daemon does."""
        self._tap = self._sources.store.tap_commits(self._fold)


@contextlib.asynccontextmanager
async def scraping(metrics: SwitchedMetrics) -> AsyncIterator[None]:
    """Scrape every ``SCRAPE_EVERY_S`` (15 times Prometheus' default rate) while inside."""
    async def every() -> None:
        while True:
            await asyncio.sleep(SCRAPE_EVERY_S)
            metrics.scrape()

    task = asyncio.create_task(every())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _block(driver: InProcessDriver, args: argparse.Namespace, name: str
                 ) -> tuple[float, float, int]:
    """One block of ``args.sessions`` sessions: (wall s, process CPU s, steps)."""
    wall, cpu = time.perf_counter(), time.process_time()
    tally = await drive(driver, args, args.sessions, name)
    if tally.failures:
        raise RuntimeError(f"block {name} failed: {tally.failures[:3]}")
    return (time.perf_counter() - wall, time.process_time() - cpu,
            args.sessions * args.turns * args.steps)


async def interleaved_run(args: argparse.Namespace, blocks: int) -> dict[str, Any]:
    """``blocks`` blocks on one fresh daemon, metrics on in half of them; the sums per mode."""
    with tempfile.TemporaryDirectory(prefix="palyra-interleave-") as data_dir:
        async with in_process(Path(data_dir), args) as driver:
            await drive(driver, args, 3, "warmup")
            metrics = SwitchedMetrics(MetricSources(
                store=driver.store, engine=driver.app.engine, models={"scripted": "scripted"}))
            metrics.off()
            sums = {False: [0.0, 0.0, 0], True: [0.0, 0.0, 0]}
            per_block: list[tuple[bool, float, float, int]] = []
            for i in range(blocks):
                on = PATTERN[i % len(PATTERN)]
                if on:
                    metrics.on()
                    async with scraping(metrics):
                        wall, cpu, steps = await _block(driver, args, f"b{i}")
                    metrics.off()
                else:
                    wall, cpu, steps = await _block(driver, args, f"b{i}")
                per_block.append((on, wall, cpu, steps))
                total = sums[on]
                total[0] += wall
                total[1] += cpu
                total[2] += steps
            metrics.close()
    result = summary(sums, per_block)
    # Proof the switch works: the on blocks' events, and only theirs, were folded.
    result["events_folded_per_on_step"] = round(metrics.folded / sums[True][2], 2)
    return result


def summary(sums: dict[bool, list[float]], per_block: list[tuple[bool, float, float, int]]
            ) -> dict[str, Any]:
    """Throughput and CPU per step of each mode, and the overhead of metrics against off."""
    def rate(total: list[float]) -> tuple[float, float]:
        return total[2] / total[0], total[1] * 1000 / total[2]

    (off_sps, off_cpu), (on_sps, on_cpu) = rate(sums[False]), rate(sums[True])
    # Neighbouring blocks (0,1), (2,3), ...: one on and one off each, by the pattern.
    pairs = [(a, b) if not a[0] else (b, a) for a, b in zip(per_block[::2], per_block[1::2],
                                                           strict=False)]
    return {
        "blocks": len(per_block), "steps_per_block": per_block[0][3],
        "off": {"steps_per_s": round(off_sps, 1), "cpu_ms_per_step": round(off_cpu, 4)},
        "metrics": {"steps_per_s": round(on_sps, 1), "cpu_ms_per_step": round(on_cpu, 4)},
        "throughput_overhead_pct": round((off_sps / on_sps - 1) * 100, 2),
        "cpu_overhead_pct": round((on_cpu / off_cpu - 1) * 100, 2),
        "paired_throughput_overhead_pct": round(statistics.median(
            (on[1] / on[3]) / (off[1] / off[3]) * 100 - 100 for off, on in pairs), 2),
        "paired_cpu_overhead_pct": round(statistics.median(
            (on[2] / on[3]) / (off[2] / off[3]) * 100 - 100 for off, on in pairs), 2),
    }


def text(result: dict[str, Any]) -> str:
    """One run's figures, as the bench prints them."""
    off, on = result["off"], result["metrics"]
    return (f"interleaved, {result['blocks']} blocks of {result['steps_per_block']} steps: "
            f"off {off['steps_per_s']} steps/s {off['cpu_ms_per_step']} CPU ms/step, "
            f"metrics {on['steps_per_s']} steps/s {on['cpu_ms_per_step']} CPU ms/step; "
            f"overhead {result['throughput_overhead_pct']:+.2f} % throughput, "
            f"{result['cpu_overhead_pct']:+.2f} % CPU/step (median of block pairs "
            f"{result['paired_throughput_overhead_pct']:+.2f} % / "
            f"{result['paired_cpu_overhead_pct']:+.2f} %); "
            f"{result['events_folded_per_on_step']} events folded per step with metrics on")
