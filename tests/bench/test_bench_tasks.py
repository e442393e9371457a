"""``bench tasks`` finishes its rounds and counts every task's durable success."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench import tasks


@pytest.mark.parametrize("producers", [1, 4])
async def test_a_round_counts_every_success_and_ends(tmp_path: Path, producers: int) -> None:
    # The worker finishes a task through ``succeed_handing_on``: a round that counted
    # only ``succeed`` never saw a success and waited for them forever.
    async with asyncio.timeout(30):
        line = await tasks.run_round(tmp_path / "round", producers, 40, 4)
    assert line["tasks"] == 40 and line["producers"] == producers
    assert line["tasks_per_s"] > 0
    assert 0 < line["start_ms_p50"] <= line["start_ms_p99"]
    assert 0 < line["enqueue_ms_p50"] <= line["enqueue_ms_p99"]
    # Enqueue, claim and success each commit; group commit may share frames.
    assert 0 < line["commits_per_task"] <= 3
    # The loop's thread is part of the process; the writer is inside commits some of
    # the window, never more than all of it.
    assert 0 < line["loop_cpu_us_per_task"] < line["cpu_us_per_task"]
    assert 0 < line["writer_busy"] <= 1
    # The writer's own CPU clock: it runs every commit, and within the window.
    assert 0 < line["writer_cpu"] <= 1
    assert line["flush_ms_mean"] > 0 and 0 <= line["writer_gil_wait"] <= 1


def test_the_dsync_floor_times_a_flushed_write(tmp_path: Path) -> None:
    floor = tasks.dsync_floor(tmp_path, writes=20)
    assert 0 < floor < 1
    assert not list(tmp_path.iterdir())  # its file is gone
