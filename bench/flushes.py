"""Count the device flushes a process requests in a window, with kernel tracepoints (perf).

What counts as a flush request: every ``fsync``, ``fdatasync``,
``sync_file_range``, ``syncfs`` and ``sync`` call, every ``msync`` with
``MS_SYNC``, and every write (``write``, ``pwrite64``, ``writev``, ``pwritev``,
``pwritev2``) to a file descriptor opened with ``O_DSYNC`` or ``O_SYNC`` (LMDB
writes its meta page that way; a preallocated log may too). A call counts
whether or not the kernel then finds dirty data to flush: this is the number
of times the process waited for stable storage.

Why perf and not a Python wrapper or strace: LMDB calls the C functions, so
wrapping ``os.fsync`` sees nothing; strace stops the process at every traced
syscall and would slow the very commits it counts. ``perf stat`` counts the
``syscalls:sys_enter_*`` tracepoints in the kernel, per process and every
thread it starts, at a cost of nanoseconds per syscall. The counters are
opened disabled (``-D -1``) and switched on and off through perf's control
FIFO, so the window is exact. The ``O_DSYNC`` descriptors are read from
``/proc/<pid>/fdinfo`` when the window opens (they become tracepoint filters)
and again when it closes, so a descriptor opened in between is reported
rather than silently missed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_TRACEFS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
SYNC_CALLS = ("fsync", "fdatasync", "sync_file_range", "syncfs", "sync")
WRITE_CALLS = ("write", "pwrite64", "writev", "pwritev", "pwritev2")
_O_DSYNC = 0o10000  # O_SYNC is __O_SYNC | O_DSYNC, so this bit catches both
_MS_SYNC = 4


def dsync_fds(pid: int) -> dict[int, str]:
    """Descriptors of ``pid`` opened with ``O_DSYNC``/``O_SYNC``, with the file each names."""
    found: dict[int, str] = {}
    root = Path(f"/proc/{pid}/fdinfo")
    for entry in root.iterdir():
        with contextlib.suppress(OSError, ValueError):
            for line in entry.read_text().splitlines():
                if line.startswith("flags:") and int(line.split()[1], 8) & _O_DSYNC:
                    found[int(entry.name)] = os.readlink(f"/proc/{pid}/fd/{entry.name}")
    return found


def _tracepoints() -> Path | None:
    for root in _TRACEFS:
        if (root / "events" / "syscalls").is_dir():
            return root / "events" / "syscalls"
    if _mount_tracefs():
        return _tracepoints()
    return None


_MOUNT_TRIED: list[bool] = []


def _mount_tracefs() -> bool:
    """Mount tracefs at its usual place once, when root and the kernel has it.

    Minimal VMs (this project's CI among them) boot without it, and then no
    flush could be counted. Mounting it changes nothing else: it only exposes
    the kernel's tracepoints. True when a mount was made.
    """
    if _MOUNT_TRIED or os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    _MOUNT_TRIED.append(True)
    target = _TRACEFS[0]
    try:
        if "tracefs" not in Path("/proc/filesystems").read_text() or not target.is_dir():
            return False
        done = subprocess.run(["mount", "-t", "tracefs", "nodev", str(target)],
                              capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and (target / "events" / "syscalls").is_dir()


def unavailable_reason() -> str | None:
    """Why flushes cannot be counted here, or None when they can."""
    if shutil.which("perf") is None:
        return "perf not installed"
    if _tracepoints() is None:
        return "no syscall tracepoints (tracefs not mounted?)"
    return None


@dataclass
class FlushCount:
    """Flush requests seen in the window; ``available`` is False when they could not be counted."""

    available: bool
    total: int = 0
    by_call: dict[str, int] = field(default_factory=dict)
    dsync_files: list[str] = field(default_factory=list)
    opened_during_window: list[str] = field(default_factory=list)
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        out: dict[str, Any] = {"available": self.available, "total": self.total,
                               "by_call": dict(self.by_call), "dsync_files": self.dsync_files}
        if self.opened_during_window:
            out["dsync_opened_during_window"] = self.opened_during_window
        if self.reason:
            out["reason"] = self.reason
        return out


class FlushCounter:
    """``perf stat`` attached to ``pid`` with its counters off; :meth:`start` and :meth:`stop` bound the window.

    Use ``with FlushCounter(pid) as counter: counter.start(); ...; count = counter.stop()``.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._dir = Path(tempfile.mkdtemp(prefix="palyra-bench-perf-"))
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctl: int | None = None
        self._ack: int | None = None
        self._events: list[str] = []
        self._fds: dict[int, str] = {}
        self._reason = unavailable_reason()

    def __enter__(self) -> FlushCounter:
        if self._reason is None:
            try:
                self._launch()
                # A first round trip proves perf attached and the FIFOs work.
                self._command("disable")
            except (OSError, RuntimeError) as exc:
                self._reason = f"perf failed to start: {exc}"
                self._close()
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    def _launch(self) -> None:
        points = _tracepoints()
        assert points is not None
        self._fds = dsync_fds(self.pid)
        args = ["perf", "stat", "-x,", "--no-big-num", "-D", "-1",
                "--control", f"fifo:{self._dir / 'ctl'},{self._dir / 'ack'}",
                "-o", str(self._dir / "out"), "-p", str(self.pid)]
        for call in SYNC_CALLS:
            if (points / f"sys_enter_{call}").is_dir():
                self._events.append(call)
                args += ["-e", f"syscalls:sys_enter_{call}"]
        if (points / "sys_enter_msync").is_dir():
            self._events.append("msync")
            args += ["-e", "syscalls:sys_enter_msync", "--filter", f"flags & {_MS_SYNC}"]
        if self._fds:
            only = " || ".join(f"fd == {fd}" for fd in sorted(self._fds))
            for call in WRITE_CALLS:
                if (points / f"sys_enter_{call}").is_dir():
                    self._events.append(call)
                    args += ["-e", f"syscalls:sys_enter_{call}", "--filter", only]
        os.mkfifo(self._dir / "ctl")
        os.mkfifo(self._dir / "ack")
        # Both ends are ours before perf starts: the control FIFO read-write (so
        # opening it never blocks), the ack FIFO read-only and non-blocking (so
        # perf's open for writing finds a reader). A dead perf then shows up as
        # a timeout in _command instead of a hang.
        self._ctl = os.open(self._dir / "ctl", os.O_RDWR)
        self._ack = os.open(self._dir / "ack", os.O_RDONLY | os.O_NONBLOCK)
        with (self._dir / "err").open("wb") as err:
            self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err)

    def _stderr(self) -> str:
        try:
            return (self._dir / "err").read_text().strip()[-500:]
        except OSError:
            return ""

    def _command(self, word: str, timeout_s: float = 10.0) -> None:
        assert self._proc is not None and self._ctl is not None and self._ack is not None
        os.write(self._ctl, (word + "\n").encode())
        # perf answers "ack" once the counters really are on (or off).
        deadline = time.monotonic() + timeout_s
        reply = b""
        while b"ack" not in reply:
            try:
                reply += os.read(self._ack, 64)
                continue
            except BlockingIOError:
                pass
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"perf did not acknowledge {word!r}: {self._stderr()}")
            time.sleep(0.001)

    def start(self) -> None:
        """Open the window: counting starts when this returns."""
        if self._proc is not None:
            self._command("enable")

    def stop(self) -> FlushCount:
        """Close the window and return what was counted."""
        if self._proc is None:
            return FlushCount(False, reason=self._reason or "perf not running")
        self._command("disable")
        opened = sorted(p for fd, p in dsync_fds(self.pid).items() if fd not in self._fds)
        self._proc.send_signal(signal.SIGINT)
        self._proc.wait(10)
        self._proc = None
        by_call = self._parse((self._dir / "out").read_text())
        return FlushCount(True, sum(by_call.values()), by_call,
                          sorted(set(self._fds.values())), opened)

    def _parse(self, text: str) -> dict[str, int]:
        counts: dict[str, int] = {}
        for line in text.splitlines():
            parts = line.split(",")
            if len(parts) < 3 or not parts[2].startswith("syscalls:sys_enter_"):
                continue
            call = parts[2].removeprefix("syscalls:sys_enter_")
            if not parts[0].strip().isdigit():
                raise RuntimeError(f"perf could not count {call}: {line}")
            name = call if call not in WRITE_CALLS else f"{call}[O_DSYNC]"
            counts[name] = counts.get(name, 0) + int(parts[0])
        missing = {c for c in self._events} - {n.split("[")[0] for n in counts}
        if missing:
            raise RuntimeError(f"perf reported nothing for {sorted(missing)}: {text[-500:]}")
        return counts

    def _close(self) -> None:
        for fd in (self._ctl, self._ack):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._ctl = self._ack = None
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None
        shutil.rmtree(self._dir, ignore_errors=True)
