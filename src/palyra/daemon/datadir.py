"""The data dir and the small private files palyra keeps in it: 0700 dir, 0600 files.

``write_private`` is how every small file the daemon or CLI keeps in the data
dir (``daemon.json``, ``cli.device_id``) is written: atomically, 0600. The
admin token (``palyra.daemon.tokens``) is created with the same modes.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def ensure_data_dir(data_dir: Path) -> None:
    """Create the data dir (0700) if missing, else tighten it to 0700; it holds secrets
    and the journal. A dir this user does not own is left as it is."""
    data_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    tighten(data_dir, DIR_MODE)


def tighten(path: Path, mode: int) -> None:
    """Drop group/other permission bits (best effort: not our file → unchanged)."""
    with contextlib.suppress(OSError):
        current = stat.S_IMODE(os.stat(path).st_mode)
        if current & 0o077:
            os.chmod(path, mode)


def write_private(path: Path, text: str) -> None:
    """Atomically (write + fsync + rename) replace ``path`` with ``text``, mode 0600."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # a leftover tmp file may have had other bits
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
