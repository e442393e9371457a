"""Give the C allocator's free pages back to the system once the daemon goes idle.

After a burst of runs the memory they used is free again, but glibc's
``malloc`` keeps free pages inside its heaps for reuse and returns only the
top of a heap past its trim threshold. ``malloc_trim(0)`` walks every arena
(each thread's too) and hands back every whole free page (``MADV_DONTNEED``).
It is called once per quiet spell: when a look finds no new commit since the
previous look but some since the last trim, so a busy daemon never pays for it
and an idle one pays once.

The same quiet spell also unmaps the resident pages of the journal's shared file
mappings (LMDB's ``data.mdb``: every page a commit wrote or a read touched since
the last spell, about 150 KB per run). They are the kernel's page cache, not memory
the daemon allocated, but while mapped they count in its ``VmRSS`` and the kernel
reclaims them last. ``MADV_DONTNEED`` on a shared file mapping loses nothing (the
data is the file's; LMDB writes with ``pwrite``, never through the map); the next
read faults the page back in from the page cache.

What it cannot give back (docs/bench.md, "open-runs"): Python's own small-object
arenas (1 MiB each, returned only when empty; a few long-lived objects made
during the burst, such as entries of the bounded caches, keep most of them).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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


_MADV_DONTNEED = 4  # Linux


def shared_mappings(maps: str, under: Path) -> list[tuple[int, int]]:
    """The ``(start, end)`` addresses of the shared file mappings below the directory
    ``under`` in ``maps`` (the text of ``/proc/<pid>/maps``). Private mappings are left
    out: dropping their pages would lose what was written to them."""
    prefix = f"{under.resolve()}/"
    ranges = []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[1][3] == "s" and fields[5].startswith(prefix):
            start, _, end = fields[0].partition("-")
            ranges.append((int(start, 16), int(end, 16)))
    return ranges


@functools.cache
def _libc_madvise() -> Callable[[int, int, int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        madvise = ctypes.CDLL(name, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    madvise.restype = ctypes.c_int
    advise: Callable[[int, int, int], int] = madvise
    return advise


def drop_mapped_pages(under: Path) -> int:
    """Unmap the resident pages of this process's shared file mappings below ``under``
    (they stay in the page cache); the bytes of mapping advised, 0 where unsupported."""
    madvise = _libc_madvise()
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return 0  # not Linux
    if madvise is None:
        return 0
    advised = 0
    for start, end in shared_mappings(maps, under):
        if madvise(start, end - start, _MADV_DONTNEED) == 0:
            advised += end - start
    return advised


def idle_trim(data_dir: Path) -> Callable[[], bool]:
    """What the daemon does once per quiet spell: :func:`malloc_trim`, then
    :func:`drop_mapped_pages` of its data dir (the journal's map)."""

    def trim() -> bool:
        trimmed = malloc_trim()
        return drop_mapped_pages(data_dir) > 0 or trimmed

    return trim


async def trim_when_idle(commits: Callable[[], int], *, every_s: float = IDLE_LOOK_S,
                         trim: Callable[[], bool] = malloc_trim) -> None:
    """Look every ``every_s`` seconds; trim once per quiet spell (until cancelled)."""
    state = Quiet()
    while True:
        await asyncio.sleep(every_s)
        state, now = after_look(state, commits())
        if now:
            trim()
