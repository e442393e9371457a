"""bench.flushes counts exactly the flush requests made inside the window, from any thread."""

from __future__ import annotations

import mmap
import os
import threading
from pathlib import Path

import pytest

from bench.flushes import FlushCounter, dsync_fds


def test_dsync_fds_lists_only_descriptors_opened_with_o_dsync_or_o_sync(tmp_path: Path) -> None:
    plain = os.open(tmp_path / "a", os.O_RDWR | os.O_CREAT, 0o600)
    dsync = os.open(tmp_path / "a", os.O_WRONLY | os.O_DSYNC)
    sync = os.open(tmp_path / "b", os.O_WRONLY | os.O_CREAT | os.O_SYNC, 0o600)
    try:
        found = dsync_fds(os.getpid())
        assert found.get(dsync) == str(tmp_path / "a")
        assert found.get(sync) == str(tmp_path / "b")
        assert plain not in found
    finally:
        for fd in (plain, dsync, sync):
            os.close(fd)


@pytest.mark.usefixtures("perf_available")
def test_counts_each_kind_of_flush_inside_the_window_only(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "data", os.O_RDWR | os.O_CREAT, 0o600)
    os.ftruncate(fd, 8192)
    dsync = os.open(tmp_path / "data", os.O_WRONLY | os.O_DSYNC)
    try:
        with FlushCounter(os.getpid()) as counter:
            os.fdatasync(fd)  # before the window: not counted
            counter.start()

            def work() -> None:  # a thread started inside the window is followed
                for _ in range(5):
                    os.pwrite(fd, b"x", 0)  # plain write: not a flush
                    os.fdatasync(fd)
                    os.pwrite(dsync, b"y", 0)
                os.write(dsync, b"z")
                with mmap.mmap(fd, 4096) as region:
                    region.flush()  # msync(MS_SYNC)

            thread = threading.Thread(target=work)
            thread.start()
            thread.join()
            os.fsync(fd)
            count = counter.stop()
            os.fsync(fd)  # after the window: not counted
    finally:
        os.close(fd)
        os.close(dsync)
    assert count.available
    nonzero = {k: v for k, v in count.by_call.items() if v}
    assert nonzero == {"fdatasync": 5, "pwrite64[O_DSYNC]": 5, "write[O_DSYNC]": 1,
                       "msync": 1, "fsync": 1}
    assert count.total == 13
    # Other O_DSYNC descriptors of this process (a store an earlier test left open
    # to simulate a crash) are reported too; ours must be among them.
    assert str(tmp_path / "data") in count.dsync_files


@pytest.mark.usefixtures("perf_available")
def test_a_dsync_descriptor_opened_inside_the_window_is_reported(tmp_path: Path) -> None:
    with FlushCounter(os.getpid()) as counter:
        counter.start()
        late = os.open(tmp_path / "late", os.O_WRONLY | os.O_CREAT | os.O_DSYNC, 0o600)
        try:
            count = counter.stop()
        finally:
            os.close(late)
    assert count.opened_during_window == [str(tmp_path / "late")]


def test_without_perf_the_count_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    with FlushCounter(os.getpid()) as counter:
        counter.start()
        count = counter.stop()
    assert not count.available
    assert count.reason == "perf not installed"
    assert count.as_dict()["reason"] == "perf not installed"
