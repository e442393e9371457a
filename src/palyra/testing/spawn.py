"""Start ``palyra serve`` as a subprocess and find its ports (tests, benchmarks).

The daemon binds ephemeral ports when asked for port 0 and publishes them in
``<data-dir>/daemon.json``; this helper waits for that file (written by the
child's own pid) rather than parsing log lines.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from palyra.daemon.datadir import ensure_data_dir
from palyra.daemon.discovery import DaemonInfo, read_daemon_info
from palyra.daemon.tokens import read_admin_token


def clean_env(**overrides: str) -> dict[str, str]:
    """This process's environment without any ``PALYRA_*`` setting, plus ``overrides``.

    A daemon or CLI child started by a test must see only the settings the test
    chooses, never ones leaked from the developer's shell.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}
    env.update(overrides)
    return env


class DaemonProcess:
    """A ``palyra serve`` child on ephemeral ports in ``data_dir``.

    Use as a context manager, or call :meth:`start` / :meth:`stop` directly
    (``kill()`` + ``start()`` simulates a crash and restart).
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        env: Mapping[str, str] | None = None,
        extra_args: tuple[str, ...] = (),
        log_path: Path | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self._env = dict(os.environ if env is None else env)
        self._extra = extra_args
        self._log_path = log_path or self.data_dir.parent / f"{self.data_dir.name}.daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.info: DaemonInfo | None = None

    @property
    def token(self) -> str:
        """The admin token the daemon uses."""
        return self._env.get("PALYRA_ADMIN_TOKEN") or read_admin_token(self.data_dir) or ""

    @property
    def pid(self) -> int:
        """The child's pid."""
        assert self.proc is not None
        return self.proc.pid

    @property
    def grpc_port(self) -> int:
        """Bound gRPC port."""
        assert self.info is not None
        return self.info.grpc_port

    @property
    def http_port(self) -> int:
        """Bound HTTP port."""
        assert self.info is not None
        return self.info.http_port

    def start(self, timeout: float = 30.0) -> DaemonProcess:
        """Spawn and wait until ``daemon.json`` names this child."""
        ensure_data_dir(self.data_dir)
        args = [sys.executable, "-m", "palyra.cli.main", "serve", "--data-dir", str(self.data_dir),
                "--grpc-port", "0", "--http-port", "0", *self._extra]
        log = self._log_path.open("ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self._env)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = read_daemon_info(self.data_dir)
            if info is not None and info.pid == self.proc.pid:
                self.info = info
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}: {self.log()[-2000:]}")
            time.sleep(0.02)
        self.kill()
        raise TimeoutError(f"daemon did not publish daemon.json: {self.log()[-2000:]}")

    def log(self) -> str:
        """Everything the child printed so far."""
        try:
            return self._log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def kill(self) -> None:
        """SIGKILL (a crash) and reap."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> DaemonProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.stop()
