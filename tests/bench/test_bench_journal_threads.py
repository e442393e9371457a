"""bench.journal's CPU by thread: each contender's line splits its CPU per event between the
callers' event loop and the one thread appends are handed to (the journal's writer, SQLite's
connection thread, the floors' threads), read from the kernel's per-thread run time."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from bench.journal import bench_floor, bench_pair, thread_cpu_s

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="per-thread run time is read from /proc")  # fmt: skip


@linux_only
async def test_each_contender_line_splits_its_cpu_between_the_loop_and_its_worker(
    tmp_path: Path,
) -> None:
    lines = await bench_pair(tmp_path, appenders=1, events=60, rounds=2)
    assert [line["config"] for line in lines] == [
        "lmdb_group_commit", "sqlite_wal_full", "floor_handoff_dsync"]  # fmt: skip
    lines.append(await bench_floor(appenders=4, events=60, rounds=2))
    for line in lines:
        loop, worker = line["loop_cpu_us_per_event"], line["worker_cpu_us_per_event"]
        # Each appended event cost the loop (prepare, the future) and the worker (taking
        # it, answering) some CPU; together no more than the process's CPU, whose clock
        # brackets the threads' readings (slack: three roundings to a tenth).
        assert loop > 0 and worker > 0, line
        assert loop + worker <= line["cpu_us_per_event"] + 0.15, line


@linux_only
def test_thread_cpu_is_read_for_live_threads_only() -> None:
    ready, go, done, end = (threading.Event() for _ in range(4))

    def work() -> None:
        ready.set()
        go.wait()
        sum(range(2_000_000))  # some CPU on this thread, then it waits (read while waiting)
        done.set()
        end.wait()

    thread = threading.Thread(target=work)
    thread.start()
    ready.wait()
    first = thread_cpu_s(thread.native_id)
    go.set()
    done.wait()
    second = thread_cpu_s(thread.native_id)
    end.set()
    thread.join()
    assert first is not None and second is not None and second > first
    assert thread_cpu_s(None) is None
    assert thread_cpu_s(2**31 - 1) is None  # no such thread here
