"""The daemon's handle on its tracing exporter process (:mod:`palyra.ops.trace_exporter`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path

from palyra.ops.config import TracingConfig

_STOP_GRACE_S = 5.0  # beyond the exporter's own timeout, for its last read and flush


# The exporter ignores SIGTERM and SIGINT (a stop reaches the whole process group and it
# must outlast the daemon's drain). Ignoring them in its ``main`` left a window as long
# as its imports in which a stop killed it; ignored before any import, as here, there
# is none. ``runpy`` then runs the module as ``python -m`` would, with these arguments.
_LAUNCH = ("import runpy, signal\n"
           "for signum in (signal.SIGTERM, signal.SIGINT):\n"
           "    signal.signal(signum, signal.SIG_IGN)\n"
           "runpy.run_module('palyra.ops.trace_exporter', run_name='__main__', alter_sys=True)\n")


class TraceExporterProcess:
    """Starts the exporter on ``data_dir`` with ``config``; :meth:`stop` ends it."""

    def __init__(self, data_dir: Path, config: TracingConfig) -> None:
        self._data_dir = data_dir
        self._config = config
        self._process: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int | None:
        """The exporter's pid while it runs."""
        return self._process.pid if self._process is not None else None

    async def start(self, after: int) -> None:
        """Trace every event committed after journal position ``after``."""
        config = self._config
        self._process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _LAUNCH,
            "--data-dir", str(self._data_dir), "--after", str(after),
            "--parent", str(os.getpid()), "--endpoint", config.otlp_endpoint,
            "--sample-ratio", repr(config.sample_ratio), "--service-name", config.service_name,
            "--export-timeout", repr(config.export_timeout_s),
            "--nice", str(config.exporter_nice),
            stdin=asyncio.subprocess.PIPE)  # closed to stop it (the kernel closes it too)

    def cpu_seconds(self) -> float:
        """CPU time the exporter has used so far (user + system; 0 once it has exited)."""
        if self._process is None or self._process.returncode is not None:
            return 0.0
        try:
            stat = Path(f"/proc/{self._process.pid}/stat").read_text()
        except OSError:
            return 0.0
        fields = stat.rpartition(")")[2].split()  # the command name may hold spaces
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    async def stop(self) -> int | None:
        """Ask the exporter to send what it holds and exit; kill it if it does not in time.
        Returns its exit status (None if it never started)."""
        process, self._process = self._process, None
        if process is None:
            return None
        if process.returncode is None:
            if process.stdin is not None:
                process.stdin.close()  # its cue: read to the head, flush, exit
            try:
                async with asyncio.timeout(self._config.export_timeout_s + _STOP_GRACE_S):
                    return await process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
        return await process.wait()
