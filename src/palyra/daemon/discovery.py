"""``<data-dir>/daemon.json``: where a running daemon listens, for the CLI and tests.

Written after both listeners are bound (so port 0 resolves to real ports) and
removed on a clean exit. A file left behind by a killed daemon is recognised
by its dead pid.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from palyra.daemon.datadir import write_private

DAEMON_FILE = "daemon.json"


@dataclasses.dataclass(frozen=True, slots=True)
class DaemonInfo:
    """The published facts about one running daemon."""

    pid: int
    grpc_host: str
    grpc_port: int
    http_host: str
    http_port: int
    data_dir: str
    version: str

    def alive(self) -> bool:
        """Whether the process that wrote this file still exists."""
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def write_daemon_info(data_dir: Path, info: DaemonInfo) -> Path:
    """Atomically (write + rename) publish ``info``, mode 0600."""
    path = data_dir / DAEMON_FILE
    write_private(path, json.dumps(dataclasses.asdict(info), indent=2) + "\n")
    return path


def read_daemon_info(data_dir: Path) -> DaemonInfo | None:
    """The published info, or ``None`` when absent or unreadable."""
    try:
        raw = json.loads((data_dir / DAEMON_FILE).read_text(encoding="utf-8"))
        return DaemonInfo(**raw)
    except (FileNotFoundError, ValueError, TypeError):
        return None


def remove_daemon_info(data_dir: Path, pid: int) -> None:
    """Remove the file if it still describes process ``pid``."""
    info = read_daemon_info(data_dir)
    if info is not None and info.pid == pid:
        (data_dir / DAEMON_FILE).unlink(missing_ok=True)
