"""A read-through cache of entity rows, made stale per table by the one writer.

Hot reads (a session's postures on every tool call) would otherwise open an
LMDB read transaction and copy the row each time, though sessions change
rarely. Each table has a version the writer thread bumps after every durable
commit that writes to it (before the callers are answered). A reader notes the
version *before* it reads LMDB and files the row under it; the row is served
only while the table's version is unchanged. A commit landing during the read
bumps the version afterwards, so a row that might predate it is never served
again: the cache can miss, never serve an old row.

Only a store with a writer in this process uses it: another process's commits
would not bump anything here.
"""

from __future__ import annotations

from collections.abc import Iterable

DEFAULT_LIMIT = 4096


class EntityCache:
    """``(table, key) -> (version, value)``; bounded, cleared whole when full."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self._limit = limit
        self._versions: dict[str, int] = {}
        self._rows: dict[tuple[str, str], tuple[int, bytes | None]] = {}

    def version(self, table: str) -> int:
        """The table's current version (note it before reading LMDB)."""
        return self._versions.get(table, 0)

    def get(self, table: str, key: str) -> tuple[bool, bytes | None]:
        """``(True, value)`` for a row filed under the table's current version."""
        hit = self._rows.get((table, key))
        if hit is not None and hit[0] == self._versions.get(table, 0):
            return True, hit[1]
        return False, None

    def put(self, table: str, key: str, version: int, value: bytes | None) -> None:
        """File a row read while the table was at ``version``."""
        if len(self._rows) >= self._limit:
            self._rows.clear()
        self._rows[(table, key)] = (version, value)

    def bump(self, tables: Iterable[str]) -> None:
        """After a durable commit that wrote ``tables`` (writer thread only)."""
        versions = self._versions
        for table in tables:
            versions[table] = versions.get(table, 0) + 1
