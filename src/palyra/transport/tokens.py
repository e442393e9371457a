"""The data dir's private files: the admin token (generated once), 0600 in a 0700 dir.

``write_private`` is how every small file the daemon or CLI keeps in the data
dir (``daemon.json``, ``cli.device_id``) is written: atomically, 0600.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

ADMIN_TOKEN_FILE = "admin.token"
DIR_MODE = 0o700
FILE_MODE = 0o600


def ensure_data_dir(data_dir: Path) -> None:
    """Create the data dir (0700) if missing, else tighten it to 0700; it holds secrets
    and the journal. A dir this user does not own is left as it is."""
    data_dir.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    _tighten(data_dir, DIR_MODE)


def _tighten(path: Path, mode: int) -> None:
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


def load_or_create_admin_token(data_dir: Path) -> tuple[str, bool]:
    """Return ``(token, created)``; create ``admin.token`` (0600) on first use.

    ``O_EXCL`` makes two concurrent first starts agree on one token: the loser
    reads the winner's file.
    """
    ensure_data_dir(data_dir)
    path = data_dir / ADMIN_TOKEN_FILE
    token = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        _tighten(path, FILE_MODE)  # e.g. a token file an operator wrote by hand
        existing = path.read_text(encoding="utf-8").strip()
        if existing:
            return existing, False
        # An empty file is a crash between create and write: rewrite it.
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC, FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    return token, True


def read_admin_token(data_dir: Path) -> str | None:
    """The stored admin token, for CLI clients; ``None`` when absent."""
    try:
        return (data_dir / ADMIN_TOKEN_FILE).read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        return None
