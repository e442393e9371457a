"""Trimming the C allocator once per quiet spell: never while commits keep coming, once
after they stop, again only after more commits."""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import os
import time
from pathlib import Path

import httpx

from palyra.daemon.trim import (
    Quiet,
    after_look,
    drop_mapped_pages,
    malloc_trim,
    shared_mappings,
    trim_when_idle,
)
from palyra.journal import EventDraft, JournalConfig, JournalStore
from palyra.testing.spawn import DaemonProcess, clean_env

_PAGE = mmap.PAGESIZE


def _resident_kib(pid: int | str, name: str) -> int:
    """Resident KiB of ``pid``'s mappings of files called ``name`` (``/proc/<pid>/smaps``)."""
    total, inside = 0, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if fields and not fields[0].endswith(":"):
            inside = len(fields) == 6 and fields[5].endswith(f"/{name}")
        elif inside and fields[0] == "Rss:":
            total += int(fields[1])
    return total


def test_a_trim_comes_once_per_quiet_spell() -> None:
    state, trims = Quiet(), []
    for commits in (3, 3, 3, 5, 9, 9, 9, 9, 10, 10):
        state, now = after_look(state, commits)
        trims.append(now)
    # 3 3: quiet after the start's commits; 5 9: busy; 9: quiet again; 10 10: once more.
    assert trims == [False, True, False, False, False, True, False, False, False, True]


def test_nothing_to_give_back_means_no_trim() -> None:
    state = Quiet()
    for _ in range(5):
        state, now = after_look(state, 0)
        assert not now


def test_glibc_trim_is_called_here() -> None:
    assert malloc_trim()  # the daemon's platform: Debian's glibc


async def test_the_daemon_loop_trims_after_the_journal_goes_quiet(tmp_path: Path) -> None:
    calls: list[int] = []
    with JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False)) as store:

        def counted() -> bool:
            calls.append(store.stats().commits)
            return malloc_trim()

        async def busy(n: int) -> None:
            for _ in range(n):
                await store.append([EventDraft("test.busy", "test")])
                await asyncio.sleep(0.004)

        task = asyncio.create_task(trim_when_idle(lambda: store.stats().commits,
                                                  every_s=0.02, trim=counted))
        try:
            await busy(50)  # ~0.2 s of commits: a look (20 ms) mostly sees new ones
            await asyncio.sleep(0.3)
            first = list(calls)
            await asyncio.sleep(0.2)
            assert calls == first  # still quiet: no second trim
            await busy(5)
            await asyncio.sleep(0.3)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert first and first[-1] == 50  # trimmed once the commits stopped
    assert calls[-1] == 55  # and again after more


def test_only_shared_file_mappings_below_the_dir_are_dropped_and_nothing_is_lost(
        tmp_path: Path) -> None:
    inside, outside = tmp_path / "data", tmp_path / "other"
    inside.mkdir()
    outside.mkdir()
    pages = 64
    files = {}
    for directory, name in ((inside, "shared.bin"), (inside, "private.bin"),
                            (outside, "shared.bin")):
        path = directory / name
        path.write_bytes(bytes(range(256)) * (pages * _PAGE // 256))
        files[(directory, name)] = path
    maps = []
    try:
        for (_, name), path in files.items():
            fd = os.open(path, os.O_RDWR)
            flags = mmap.MAP_SHARED if name == "shared.bin" else mmap.MAP_PRIVATE
            maps.append(mmap.mmap(fd, pages * _PAGE, flags=flags))
            os.close(fd)
        shared_in, private_in, shared_out = maps
        private_in[0:4] = b"mine"  # only in this process's copy, never in the file
        shared_in[0:4] = b"ours"  # written through the map (LMDB's lock file is): the file's
        for m in maps:  # every page resident
            assert len([m[i] for i in range(0, pages * _PAGE, _PAGE)]) == pages
        listed = shared_mappings(Path("/proc/self/maps").read_text(), inside)
        assert len(listed) == 1 and listed[0][1] - listed[0][0] == pages * _PAGE
        before = _resident_kib("self", "shared.bin")
        assert drop_mapped_pages(inside) == pages * _PAGE
        # Only the shared mapping below the dir lost its resident pages ...
        assert before - _resident_kib("self", "shared.bin") >= pages * _PAGE // 1024 - 8
        assert _resident_kib("self", "private.bin") >= pages * _PAGE // 1024
        # ... and every byte still reads the same.
        assert private_in[0:4] == b"mine"
        assert shared_in[0:4] == b"ours" == files[(inside, "shared.bin")].read_bytes()[:4]
        assert shared_in[4:] == shared_out[4:] == files[(inside, "shared.bin")].read_bytes()[4:]
    finally:
        for m in maps:
            m.close()


async def test_the_journal_map_drops_its_pages_and_reads_the_same(tmp_path: Path) -> None:
    with JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False)) as store:
        for i in range(200):
            await store.append([EventDraft("test.filler", "s", payload={"text": f"{i:04d}" * 200})])
        before = [e.payload for e in store.read_range(0, 500)]
        resident = _resident_kib("self", "data.mdb")
        assert resident > 256
        assert drop_mapped_pages(tmp_path / "data") > 0
        assert _resident_kib("self", "data.mdb") < resident // 8
        assert [e.payload for e in store.read_range(0, 500)] == before


def test_an_idle_daemon_holds_no_journal_pages_after_runs(tmp_path: Path) -> None:
    token = "idle-trim-token"
    headers = {"authorization": f"Bearer {token}", "x-palyra-principal": "user:idle",
               "x-palyra-device-id": "01J00000000000000000000000"}
    with DaemonProcess(tmp_path / "data", env=clean_env(PALYRA_ADMIN_TOKEN=token)) as daemon, \
            httpx.Client(base_url=f"http://127.0.0.1:{daemon.http_port}", headers=headers,
                         timeout=60) as client:
        for i in range(20):
            answer = client.post("/v1/runs", json={"sessionKey": f"s{i}",
                                                   "input": {"text": "hi"}, "wait": True})
            answer.raise_for_status()
            run_id = answer.json()["run"]["runId"]
            client.post(f"/v1/runs/{run_id}:complete", json={}).raise_for_status()
        busy = _resident_kib(daemon.pid, "data.mdb")
        assert busy > 1024  # what 20 runs' commits made resident
        deadline = time.monotonic() + 40  # two quiet looks, 5 s apart, after the last commit
        while (held := _resident_kib(daemon.pid, "data.mdb")) > 256 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert held <= 256, f"{held} KiB of data.mdb still mapped ({busy} KiB when busy)"
