"""The admin token: generated once into ``<data-dir>/admin.token`` (0600), read by the CLI."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from palyra.daemon.datadir import FILE_MODE, ensure_data_dir, tighten

ADMIN_TOKEN_FILE = "admin.token"


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
        tighten(path, FILE_MODE)  # e.g. a token file an operator wrote by hand
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
