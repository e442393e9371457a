"""What a measured process reports about itself: CPU per thread, proto messages built, journal counters.

The harness takes a :func:`snapshot` before and after the measured window and
subtracts them (:func:`delta`). In process it calls :func:`snapshot` directly;
a daemon started by the bench loads this module through
``bench/_site/sitecustomize.py`` and answers snapshots on a Unix socket
(:func:`serve`, :func:`remote_snapshot`), so both paths measure the same way.

* CPU: ``time.process_time()`` for the process and ``/proc/self/task/<tid>/schedstat``
  (nanoseconds on CPU, the same clock) per thread, named by :mod:`threading`;
  the kernel's share (``os.times()``, ``/proc/self/task/<tid>/stat``) in ticks.
  The main thread runs the event loop (``asyncio.run`` in the bench and in
  ``palyra serve``); threads that ended during the window are in the process
  total only, which is why "other" is computed as the remainder.
* Messages: every betterproto2 message runs ``Message.__post_init__`` when it is
  built (constructor, ``parse``, ``from_dict``, copies), so wrapping it counts them
  all. Each thread counts into its own table, so no increment is lost.
* Journal: every open ``palyra.journal.JournalStore`` (found once through the
  garbage collector, so nothing in palyra needs a hook) gives ``stats()`` and
  LMDB's own count of write transactions (``env.info()['last_txnid']``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib
import json
import os
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

Snapshot = dict[str, Any]


class MessageCounter:
    """Counts betterproto2 message constructions per thread and type while installed."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._tables: list[tuple[str, dict[type, int]]] = []
        self._original: Callable[[Any], None] | None = None

    def install(self) -> None:
        """Wrap ``betterproto2.Message.__post_init__`` (idempotent)."""
        # palyra first: it imports betterproto2 as the daemon does (palyra.imports, without
        # pydantic), so a probed daemon is the same size as an unprobed one.
        importlib.import_module("palyra")
        import betterproto2

        if self._original is not None:
            return
        original = betterproto2.Message.__post_init__
        local, tables = self._local, self._tables

        def counting(message: Any) -> None:
            try:
                table = local.table
            except AttributeError:
                table = local.table = {}
                tables.append((threading.current_thread().name, table))
            cls = type(message)
            table[cls] = table.get(cls, 0) + 1
            original(message)

        self._original = original
        betterproto2.Message.__post_init__ = counting  # type: ignore[method-assign,assignment]

    def uninstall(self) -> None:
        """Put the original ``__post_init__`` back."""
        import betterproto2

        if self._original is not None:
            betterproto2.Message.__post_init__ = self._original  # type: ignore[method-assign,assignment]
            self._original = None

    def counts(self) -> dict[str, Any]:
        """Totals so far: ``total``, ``by_type`` and ``by_thread``."""
        by_type: dict[str, int] = {}
        by_thread: dict[str, int] = {}
        for thread, table in list(self._tables):
            copy = dict(table)  # one C call under the GIL: a consistent copy
            for cls, n in copy.items():
                by_type[cls.__name__] = by_type.get(cls.__name__, 0) + n
                by_thread[thread] = by_thread.get(thread, 0) + n
        return {"total": sum(by_type.values()), "by_type": by_type, "by_thread": by_thread}


class GcClock:
    """Time spent in the cyclic garbage collector, per generation (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.collections = [0, 0, 0]
        self.longest = [0.0, 0.0, 0.0]  # since the last snapshot: a window's longest pause
        self._started = 0.0

    def install(self) -> None:
        """Start timing collections (idempotent)."""
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = info.get("generation", 2)
        took = time.perf_counter() - self._started
        self.seconds[generation] += took
        self.collections[generation] += 1
        if took > self.longest[generation]:
            self.longest[generation] = took

    def counts(self) -> dict[str, Any]:
        """Seconds and collections so far, per generation, and the longest pause of each
        since the previous call (so a snapshot taken at a window's end holds the window's)."""
        longest, self.longest = self.longest, [0.0, 0.0, 0.0]
        return {"s": list(self.seconds), "n": list(self.collections), "longest_s": longest,
                "frozen": gc.get_freeze_count()}


COUNTER = MessageCounter()
GC_CLOCK = GcClock()
GC_CLOCK.install()
_stores: list[weakref.ref[Any]] = []


def thread_class(name: str, is_main: bool) -> str:
    """Which bucket a thread's CPU goes to: ``event_loop``, ``journal`` or ``other``."""
    if is_main:
        return "event_loop"
    return "journal" if "journal" in name else "other"


_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def thread_cpu() -> tuple[dict[str, float], dict[str, float]]:
    """CPU seconds of each live thread, and the part spent in the kernel, keyed ``<bucket>:<name>``.

    The total comes from ``schedstat`` (nanoseconds); the kernel share from
    ``stat``'s stime (clock ticks, so coarse on short windows).
    """
    main = threading.main_thread()
    total: dict[str, float] = {}
    kernel: dict[str, float] = {}
    for thread in threading.enumerate():
        tid = thread.native_id
        if tid is None:
            continue
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as handle:
                ns = int(handle.read().split()[0])
            with open(f"/proc/self/task/{tid}/stat") as handle:
                # Fields after the parenthesised name; stime is field 15 overall.
                stime = int(handle.read().rpartition(")")[2].split()[12]) * _TICK_S
        except (OSError, ValueError, IndexError):
            continue  # ended between enumerate() and here
        # Executor threads are numbered (asyncio_0, asyncio_1): one line for all.
        name = thread.name.rstrip("0123456789").rstrip("_-") or thread.name
        key = f"{thread_class(thread.name, thread is main)}:{name}"
        total[key] = total.get(key, 0.0) + ns / 1e9
        kernel[key] = kernel.get(key, 0.0) + stime
    return total, kernel


def register_store(store: Any) -> None:
    """Measure ``store`` (a ``JournalStore``) without searching for it."""
    if all(ref() is not store for ref in _stores):
        _stores.append(weakref.ref(store))


def _open_stores() -> list[Any]:
    live = [s for s in (ref() for ref in _stores) if s is not None and not getattr(s, "_closed", False)]
    if live:
        return live
    journal = sys.modules.get("palyra.journal")
    if journal is None:
        return []
    cls = journal.JournalStore
    found = [o for o in gc.get_objects() if isinstance(o, cls) and not getattr(o, "_closed", False)]
    if not found:
        found = _reachable_from_frames(cls)
    for store in found:
        register_store(store)
    return found


def _reachable_from_frames(cls: type, depth: int = 4, budget: int = 200_000) -> list[Any]:
    """Instances of ``cls`` a few references away from any thread's stack.

    A daemon that called ``gc.freeze()`` hides its start-up objects (the store among
    them) from ``gc.get_objects()``; its serve loop's frame still holds them.
    """
    seen: set[int] = set()
    layer: list[Any] = []
    for frame in sys._current_frames().values():
        walk: Any = frame
        while walk is not None:
            layer += list(walk.f_locals.values())
            walk = walk.f_back
    found: list[Any] = []
    for _ in range(depth):
        following: list[Any] = []
        for obj in layer:
            if id(obj) in seen or len(seen) > budget:
                continue
            seen.add(id(obj))
            if isinstance(obj, cls):
                if not getattr(obj, "_closed", False):
                    found.append(obj)
                continue
            if isinstance(obj, str | bytes | int | float):
                continue
            following += gc.get_referents(obj)
        layer = following
    return found


def journal_counters() -> dict[str, int]:
    """Summed ``JournalStore.stats()`` integer fields plus ``lmdb_txns`` (LMDB's last txn id)."""
    out: dict[str, int] = {}
    for store in _open_stores():
        stats = store.stats()
        fields = (dataclasses.asdict(stats)
                  if dataclasses.is_dataclass(stats) and not isinstance(stats, type)
                  else vars(stats))
        for key, value in fields.items():
            if isinstance(value, int) and not isinstance(value, bool) and key != "map_size":
                out[key] = out.get(key, 0) + value
        # Through a read: it waits until LMDB holds every commit already answered
        # (callers hear of a commit once its frame is durable, just before that).
        with contextlib.suppress(AttributeError, KeyError, Exception), store.env.read() as txn:
            out["lmdb_txns"] = out.get("lmdb_txns", 0) + int(txn.id())
    return out


def _proc_file(name: str, keys: tuple[str, ...], scale: float = 1.0) -> dict[str, float]:
    out: dict[str, float] = {}
    with contextlib.suppress(OSError), open(f"/proc/self/{name}") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key in keys:
                out[key] = int(value.split()[0]) * scale
    return out


def snapshot() -> Snapshot:
    """This process, now: CPU (process and per thread), messages, journal counters, I/O, memory.

    The journal is read first: the first call searches the heap for stores, and
    that must not land between the clocks of a "before" snapshot and the window.
    """
    journal = journal_counters()
    cpu_s, times = time.process_time(), os.times()
    threads, threads_sys = thread_cpu()
    return {
        "pid": os.getpid(),
        "cpu_s": cpu_s,
        "sys_s": times.system,
        "threads": threads,
        "threads_sys": threads_sys,
        "messages": COUNTER.counts(),
        "gc": GC_CLOCK.counts(),
        "journal": journal,
        "io": _proc_file("io", ("wchar", "write_bytes", "syscw")),
        "mem_mib": _proc_file("status", ("VmRSS", "VmHWM"), 1 / 1024),
    }


def _sub(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    return {k: v - before.get(k, 0) for k, v in after.items() if isinstance(v, int | float)}


def delta(before: Snapshot, after: Snapshot) -> dict[str, Any]:
    """What happened between two snapshots of one process."""
    return {
        "cpu_s": after["cpu_s"] - before["cpu_s"],
        "sys_s": after["sys_s"] - before["sys_s"],
        "threads": _sub(after["threads"], before["threads"]),
        "threads_sys": _sub(after["threads_sys"], before["threads_sys"]),
        "messages": {
            "total": after["messages"]["total"] - before["messages"]["total"],
            "by_type": _sub(after["messages"]["by_type"], before["messages"]["by_type"]),
            "by_thread": _sub(after["messages"]["by_thread"], before["messages"]["by_thread"]),
        },
        "gc": {key: [a - b for a, b in zip(after["gc"][key], before["gc"][key], strict=True)]
               for key in ("s", "n")},
        "gc_frozen": after["gc"]["frozen"],
        "gc_longest_s": after["gc"].get("longest_s", [0.0, 0.0, 0.0]),
        "journal": _sub(after["journal"], before["journal"]),
        "io": _sub(after["io"], before["io"]),
        "mem_mib": after["mem_mib"],
        "mem_before_mib": before["mem_mib"],
    }


# --- the daemon side: answer snapshots on a Unix socket ---------------------------------------


def serve(path: str, *, messages: bool = True) -> threading.Thread:
    """Count messages from now on (unless ``messages`` is False: the count wraps every
    message's construction, a cost the measured CPU would carry) and answer one JSON
    snapshot per connection on ``path``."""
    if messages:
        COUNTER.install()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener.bind(path)
    listener.listen(4)

    def loop() -> None:
        while True:
            conn, _ = listener.accept()
            with conn:
                conn.sendall(json.dumps(snapshot()).encode() + b"\n")

    thread = threading.Thread(target=loop, name="bench-probe", daemon=True)
    thread.start()
    return thread


def remote_snapshot(path: str, timeout_s: float = 30.0) -> Snapshot:
    """Ask the process serving ``path`` for a snapshot."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout_s)
        conn.connect(path)
        chunks = []
        while chunk := conn.recv(1 << 16):
            chunks.append(chunk)
    result: Snapshot = json.loads(b"".join(chunks))
    return result


def profile_until_exit(path: str) -> None:
    """Profile this process with yappi (CPU clock, all threads); write pstats to ``path`` at exit."""
    import atexit

    import yappi

    yappi.set_clock_type("cpu")
    yappi.start(builtins=True)

    def dump() -> None:
        yappi.stop()
        yappi.get_func_stats().save(path, type="pstat")

    atexit.register(dump)


def cprofile_until_exit(path: str) -> None:
    """Profile this process's main thread (the event loop) with cProfile; write pstats at exit.

    Needs nothing beyond the standard library (yappi may not be installed), at the price of
    seeing only the main thread: the journal writer's thread is not in it. The clock is the
    thread's CPU time, not cProfile's default wall clock: on shared cores a socket write
    that wakes the client is often followed by the daemon being switched out, and the wall
    clock would charge that wait to the write.
    """
    import atexit
    import cProfile

    profiler = cProfile.Profile(time.thread_time)
    profiler.enable()

    def dump() -> None:
        profiler.disable()
        profiler.dump_stats(path)

    atexit.register(dump)
