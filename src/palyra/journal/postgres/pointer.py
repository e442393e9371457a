"""The data dir's note that its journal lives in PostgreSQL (no psycopg import here).

A daemon on the PostgreSQL backend still has a data dir (admin token,
checkpoint key, ``daemon.json``). Its writable open leaves ``journal/postgres.json``
there, naming the database, so a read-only open of that data dir (``palyra
journal verify``, ``export``, ``doctor``) finds the same journal without being
told the DSN again. Mode 0600, like ``admin.token``: a DSN may hold a password.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

POINTER_FILE = "postgres.json"


def write_pointer(journal_path: Path, dsn: str) -> None:
    """Record ``dsn`` as this data dir's journal (atomically, 0600)."""
    target = journal_path / POINTER_FILE
    tmp = target.with_name(f".{POINTER_FILE}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({"backend": "postgres", "dsn": dsn}, handle)
    os.replace(tmp, target)


def read_pointer(journal_path: Path) -> str | None:
    """The DSN this data dir's journal lives at, or None when it is not on PostgreSQL."""
    try:
        data = json.loads((journal_path / POINTER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    dsn = data.get("dsn") if isinstance(data, dict) else None
    return dsn if isinstance(dsn, str) and dsn else None

