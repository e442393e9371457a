"""bench.journal's CPU by thread: each contender's line splits its CPU per event between the
callers' event loop and the one thread appends are handed to (the journal's writer, SQLite's
connection thread, the floors' threads), read from the kernel's per-thread run time, and
counts how often each of the two slept and was preempted."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from bench.journal import bench_floor, bench_pair, thread_cpu_s, thread_switches

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
        # Every handed-off event was waited for: the worker slept on its queue for the
        # first one at least, and no count is negative or missing.
        assert line["worker_sleeps_per_event"] > 0, line
        for field in ("loop_sleeps_per_event", "loop_preempted_per_event",
                      "worker_preempted_per_event"):  # fmt: skip
            assert line[field] >= 0, (field, line)


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


@linux_only
def test_a_thread_that_slept_counts_a_voluntary_switch() -> None:
    readable, writable = os.pipe()
    me = threading.get_native_id()
    asleep = threading.Event()

    def writer() -> None:
        asleep.wait()
        # Written only once this thread is asleep (its /proc state) after ``before`` was
        # read, so it must have switched out voluntarily since: no timing involved.
        while _state(me) != "S":
            os.sched_yield()
        os.write(writable, b"x")

    helper = threading.Thread(target=writer)
    helper.start()
    before = thread_switches(me)
    asleep.set()
    os.read(readable, 1)  # blocks until the helper sees this thread asleep
    after = thread_switches(me)
    helper.join()
    os.close(readable)
    os.close(writable)
    assert before is not None and after is not None
    assert after[0] > before[0] and after[1] >= before[1]
    assert thread_switches(2**31 - 1) is None  # no such thread here
    assert thread_switches(None) is None


def _state(native_id: int) -> str:
    with open(f"/proc/self/task/{native_id}/stat", encoding="ascii") as handle:
        return handle.read().rsplit(")", 1)[1].split()[0]
