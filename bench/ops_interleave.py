"""``--ops interleave``: metrics (or tracing) on and off in short blocks of one run.

Runs of a second or more swing by tens of percent on a shared machine (other
processes come and go), which hides a 2 % effect between whole runs however many
are taken. Here one in-process daemon runs many short blocks of the tool loop,
the instrumentation on in half of them (in the order off, on, on, off, ... so a
drift in the load falls on both alike):

* metrics: the daemon's commit tap on (the fold runs on the journal writer's
  thread) and a scrape every ``SCRAPE_EVERY_S``;
* tracing: the daemon's exporter process (100 % sampling, OTLP/HTTP protobuf to
  a loopback collector) continued, and stopped with SIGSTOP in the off blocks
  (see :class:`ExporterSwitch` for why that figure is an upper bound).

Each block's wall time and the process's CPU time (every thread) are summed per
mode; the overhead is the ratio of the sums, and the median of the ratios of
neighbouring blocks beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import signal
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from bench.inproc import InProcessDriver, in_process
from bench.ops import SCRAPE_EVERY_S, SETTLE_S, collector
from bench.workload import drive
from palyra.ops.config import TracingConfig
from palyra.ops.metrics import DaemonMetrics, MetricSources
from palyra.ops.trace_process import TraceExporterProcess

PATTERN = (False, True, True, False)  # ABBA: a linear drift in the load costs both modes alike


class SwitchedMetrics(DaemonMetrics):
    """The daemon's metrics, its commit tap switched on and off between blocks (no clock
    around the fold: its own system calls would be counted as the metrics' cost), and
    scraped every ``SCRAPE_EVERY_S`` (15 times Prometheus' default rate) while on."""

    _scraper: asyncio.Task[None] | None = None

    def off(self) -> None:
        """Stop folding (what commits now is not counted) and scraping."""
        self._sources.store.untap(self._tap)
        if self._scraper is not None:
            self._scraper.cancel()
            self._scraper = None

    def on(self) -> None:
        """Fold every commit from now on, as the daemon does, and scrape."""
        self._tap = self._sources.store.tap_commits(self._fold)
        self._scraper = asyncio.get_running_loop().create_task(self._scrape_every())

    async def _scrape_every(self) -> None:
        while True:
            await asyncio.sleep(SCRAPE_EVERY_S)
            self.scrape()


class ExporterSwitch:
    """The daemon's tracing exporter process, stopped (SIGSTOP) in off blocks.

    A stopped exporter does not skip what commits meanwhile: once continued it
    traces the off block's events too, so every span's work falls in the on
    blocks, twice their share. The overhead this measures is an upper bound,
    about twice the cost of tracing the on blocks alone.
    """

    def __init__(self, pid: int) -> None:
        self._pid = pid

    def off(self) -> None:
        """Stop the exporter where it is."""
        os.kill(self._pid, signal.SIGSTOP)

    def on(self) -> None:
        """Let it run (it reads on from where it stopped)."""
        os.kill(self._pid, signal.SIGCONT)


@contextlib.asynccontextmanager
async def switch_for(mode: str, driver: InProcessDriver, counters: dict[str, float]
                     ) -> AsyncIterator[SwitchedMetrics | ExporterSwitch]:
    """The switch of ``mode`` on ``driver``'s daemon, off to begin with."""
    if mode == "metrics":
        metrics = SwitchedMetrics(MetricSources(
            store=driver.store, engine=driver.app.engine, models={"scripted": "scripted"}))
        metrics.off()
        try:
            yield metrics
        finally:
            metrics.off()
            counters["events_folded"] = metrics.folded
        return
    async with collector() as (port, seen):
        tracer = TraceExporterProcess(driver.store.data_dir, TracingConfig(
            enabled=True, otlp_endpoint=f"http://127.0.0.1:{port}/v1/traces"))
        await tracer.start(driver.store.head().count)
        await asyncio.sleep(SETTLE_S)  # its imports done before the first block
        assert tracer.pid is not None
        cpu_before = tracer.cpu_seconds()
        switch = ExporterSwitch(tracer.pid)
        switch.off()
        try:
            yield switch
        finally:
            switch.on()  # to read to the head and exit
            reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
            began = time.perf_counter()
            await tracer.stop()  # how long it takes says how far behind the exporter was
            counters["exporter_stop_s"] = time.perf_counter() - began
            ended = resource.getrusage(resource.RUSAGE_CHILDREN)
            lifetime = ended.ru_utime + ended.ru_stime - reaped.ru_utime - reaped.ru_stime
            counters["exporter_cpu_s"] = lifetime - cpu_before
    counters["otlp_bytes"] = seen.get("bytes", 0)


async def _block(driver: InProcessDriver, args: argparse.Namespace, name: str
                 ) -> tuple[float, float, int]:
    """One block of ``args.sessions`` sessions: (wall s, process CPU s, steps)."""
    wall, cpu = time.perf_counter(), time.process_time()
    tally = await drive(driver, args, args.sessions, name)
    if tally.failures:
        raise RuntimeError(f"block {name} failed: {tally.failures[:3]}")
    return (time.perf_counter() - wall, time.process_time() - cpu,
            args.sessions * args.turns * args.steps)


async def interleaved_run(args: argparse.Namespace, mode: str, blocks: int) -> dict[str, Any]:
    """``blocks`` blocks on one fresh daemon, ``mode`` on in half of them; the sums per mode."""
    counters: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="palyra-interleave-") as data_dir:
        async with in_process(Path(data_dir), args) as driver:
            await drive(driver, args, 3, "warmup")
            sums = {False: [0.0, 0.0, 0], True: [0.0, 0.0, 0]}
            per_block: list[tuple[bool, float, float, int]] = []
            first = driver.store.head().count
            async with switch_for(mode, driver, counters) as switch:
                for i in range(blocks):
                    on = PATTERN[i % len(PATTERN)]
                    if on:
                        switch.on()
                    wall, cpu, steps = await _block(driver, args, f"b{i}")
                    if on:
                        switch.off()
                    per_block.append((on, wall, cpu, steps))
                    total = sums[on]
                    total[0] += wall
                    total[1] += cpu
                    total[2] += steps
                events = driver.store.head().count - first
    result = {"mode": mode, **summary(sums, per_block),
              "per_block": [[on, round(wall, 4), round(cpu, 4), steps]
                            for on, wall, cpu, steps in per_block]}
    every_step = sums[False][2] + sums[True][2]
    result["events_per_step"] = round(events / every_step, 2)
    if mode == "metrics":
        # Proof the switch works: the on blocks' events, and only theirs, were folded.
        result["events_folded_per_on_step"] = round(counters["events_folded"] / sums[True][2], 2)
    else:  # the exporter traced every block's events (see ExporterSwitch)
        result["exporter_cpu_ms_per_step"] = round(
            counters["exporter_cpu_s"] * 1000 / every_step, 4)
        result["otlp_bytes_per_step"] = round(counters["otlp_bytes"] / every_step, 1)
        result["exporter_stop_s"] = round(counters["exporter_stop_s"], 3)
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
        "on": {"steps_per_s": round(on_sps, 1), "cpu_ms_per_step": round(on_cpu, 4)},
        "throughput_overhead_pct": round((off_sps / on_sps - 1) * 100, 2),
        "cpu_overhead_pct": round((on_cpu / off_cpu - 1) * 100, 2),
        "paired_throughput_overhead_pct": round(statistics.median(
            (on[1] / on[3]) / (off[1] / off[3]) * 100 - 100 for off, on in pairs), 2),
        "paired_cpu_overhead_pct": round(statistics.median(
            (on[2] / on[3]) / (off[2] / off[3]) * 100 - 100 for off, on in pairs), 2),
    }


def text(result: dict[str, Any]) -> str:
    """One run's figures, as the bench prints them."""
    off, on = result["off"], result["on"]
    tail = (f"{result['events_folded_per_on_step']} events folded per step with metrics on"
            if result["mode"] == "metrics" else
            f"the exporter {result['exporter_cpu_ms_per_step']} CPU ms/step (every block's "
            f"spans, sent in the on blocks: an upper bound), its last read and flush "
            f"{result['exporter_stop_s']} s")
    return (f"interleaved {result['mode']}, {result['blocks']} blocks of "
            f"{result['steps_per_block']} steps: off {off['steps_per_s']} steps/s "
            f"{off['cpu_ms_per_step']} CPU ms/step, on {on['steps_per_s']} steps/s "
            f"{on['cpu_ms_per_step']} CPU ms/step; overhead "
            f"{result['throughput_overhead_pct']:+.2f} % throughput, "
            f"{result['cpu_overhead_pct']:+.2f} % CPU/step (median of block pairs "
            f"{result['paired_throughput_overhead_pct']:+.2f} % / "
            f"{result['paired_cpu_overhead_pct']:+.2f} %); {tail}")
