"""A throwaway PostgreSQL server on loopback, for tests and benchmarks.

It runs Debian's ``postgresql`` package (``tools/system-packages.txt`` installs
it): ``initdb`` and ``postgres`` are found under ``/usr/lib/postgresql/*/bin``,
never on ``PATH``, so a fresh machine works as well as this one. The cluster
lives in a temporary directory this object owns and removes. ``postgres``
refuses to run as root, and CI runs as root: then the server runs as the
unprivileged ``nobody`` user, which owns the data directory. It listens on
127.0.0.1 only, on a free port, with trust authentication (loopback only).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg

_UNPRIVILEGED = "nobody"
_SUPERUSER = "postgres"
_START_TIMEOUT_S = 60.0


def server_binaries() -> Path:
    """The ``bin`` directory of the newest installed PostgreSQL major version.

    Raises:
        FileNotFoundError: Debian's ``postgresql`` package is not installed.
    """
    found = sorted(
        (Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/postgres")),
        key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else -1,
    )
    if not found:
        raise FileNotFoundError(
            "no PostgreSQL server under /usr/lib/postgresql/*/bin: run "
            "`python3 tools/ensure_system_packages.py` as root (installs Debian's postgresql)"
        )
    return found[-1]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PostgresServer:
    """``initdb`` + ``postgres`` in a temporary directory; :meth:`stop` removes it all.

    ``durable``: keep PostgreSQL's ``fsync`` on (benchmarks); tests turn it off,
    since a killed process, unlike a lost machine, keeps the page cache.
    """

    def __init__(self, *, durable: bool = False) -> None:
        self.durable = durable
        self.port = 0
        self.root: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._databases = 0

    def _as_server_user(self) -> dict[str, Any]:
        """``subprocess`` arguments that drop root to the unprivileged user."""
        if os.geteuid() != 0:
            return {}
        user = pwd.getpwnam(_UNPRIVILEGED)
        return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}

    def start(self) -> PostgresServer:
        """Create the cluster and start the server; return once it accepts connections."""
        bin_dir = server_binaries()
        self.root = Path(tempfile.mkdtemp(prefix="palyra-pg-"))
        data, sockets = self.root / "data", self.root / "run"
        sockets.mkdir()
        drop = self._as_server_user()
        if drop:
            for path in (self.root, sockets):
                os.chown(path, drop["user"], drop["group"])
        self.port = _free_port()
        subprocess.run(
            [str(bin_dir / "initdb"), "-D", str(data), "-U", _SUPERUSER, "--auth=trust",
             "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"],
            check=True, capture_output=True, cwd=self.root, **drop,
        )  # fmt: skip
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(sockets),
            "fsync": "on" if self.durable else "off",
            "full_page_writes": "on" if self.durable else "off",
            "max_connections": "200",
            "shared_buffers": "64MB",
        }
        argv = [str(bin_dir / "postgres"), "-D", str(data)]
        for name, value in settings.items():
            argv += ["-c", f"{name}={value}"]
        log = open(self.root / "server.log", "wb")  # noqa: SIM115 - the child keeps it
        with log:
            self._process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.root,
                start_new_session=True, **drop,
            )  # fmt: skip
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(f"postgres exited at start-up:\n{self.log()}")
            try:
                with psycopg.connect(self.dsn(), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"postgres did not start:\n{self.log()}") from None
                time.sleep(0.05)

    @property
    def pid(self) -> int | None:
        """The postmaster's pid while it runs."""
        return self._process.pid if self._process is not None else None

    def log(self) -> str:
        """The server's log so far (for error messages)."""
        if self.root is None:
            return ""
        with contextlib.suppress(OSError):
            return (self.root / "server.log").read_text(errors="replace")[-4000:]
        return ""

    def dsn(self, database: str = "postgres") -> str:
        """A libpq URI for ``database`` on this server."""
        return f"postgresql://{_SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        """A new, empty database; returns its DSN."""
        if name is None:
            self._databases += 1
            name = f"palyra_{os.getpid()}_{self._databases}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return self.dsn(name)

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its directory."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
