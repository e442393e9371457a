"""Give the C allocator's free pages back to the system once the daemon goes idle.

After a burst of runs the memory they used is free again, but glibc's
``malloc`` keeps free pages inside its heaps for reuse and returns only the
top of a heap past its trim threshold. ``malloc_trim(0)`` walks every arena
(each thread's too) and hands back every whole free page (``MADV_DONTNEED``).
It is called once per quiet spell: when a look finds no new commit since the
previous look but some since the last trim, so a busy daemon never pays for it
and an idle one pays once.

What it cannot give back (docs/bench.md, "Memory"): Python's own small-object
arenas (1 MiB each, returned only when empty; a few long-lived objects made
during the burst, such as entries of the bounded caches, keep most of them) and
LMDB's mapped file pages (page cache, not the daemon's memory).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
from collections.abc import Callable
from dataclasses import dataclass

IDLE_LOOK_S = 5.0
"""How often the daemon looks whether it went quiet."""


@dataclass(frozen=True, slots=True)
class Quiet:
    """The commit counter at the previous look and at the last trim."""

    looked: int = -1
    trimmed: int = 0


def after_look(state: Quiet, commits: int) -> tuple[Quiet, bool]:
    """The state after a look that read ``commits``, and whether to trim now: no commit
    since the previous look (idle), some since the last trim (there is something to give)."""
    trim = commits == state.looked and commits != state.trimmed
    return Quiet(looked=commits, trimmed=commits if trim else state.trimmed), trim


@functools.cache
def _libc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None  # not glibc (musl, macOS): nothing to call
    return trim


def malloc_trim() -> bool:
    """``malloc_trim(0)`` where the C library has it; whether it was called."""
    trim = _libc_trim()
    if trim is None:
        return False
    trim(0)
    return True


async def trim_when_idle(commits: Callable[[], int], *, every_s: float = IDLE_LOOK_S,
                         trim: Callable[[], bool] = malloc_trim) -> None:
    """Look every ``every_s`` seconds; trim once per quiet spell (until cancelled)."""
    state = Quiet()
    while True:
        await asyncio.sleep(every_s)
        state, now = after_look(state, commits())
        if now:
            trim()
