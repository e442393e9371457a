"""The admin token file: generated once, stored 0600 in the data dir."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

ADMIN_TOKEN_FILE = "admin.token"


def ensure_data_dir(data_dir: Path) -> None:
    """Create the data dir (0700) if missing; it holds secrets and the journal."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)


def load_or_create_admin_token(data_dir: Path) -> tuple[str, bool]:
    """Return ``(token, created)``; create ``admin.token`` (0600) on first use.

    ``O_EXCL`` makes two concurrent first starts agree on one token: the loser
    reads the winner's file.
    """
    ensure_data_dir(data_dir)
    path = data_dir / ADMIN_TOKEN_FILE
    token = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        existing = path.read_text(encoding="utf-8").strip()
        if existing:
            return existing, False
        # An empty file is a crash between create and write: rewrite it.
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC, 0o600)
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
