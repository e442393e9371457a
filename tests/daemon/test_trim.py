"""Trimming the C allocator once per quiet spell: never while commits keep coming, once
after they stop, again only after more commits."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from palyra.daemon.trim import Quiet, after_look, malloc_trim, trim_when_idle
from palyra.journal import EventDraft, JournalConfig, JournalStore


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
