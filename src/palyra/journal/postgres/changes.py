"""Which entity rows each commit wrote, kept in the database for the other daemons' caches.

A daemon caches entity rows (``read.entity_cache``) and tables (bindings, the
memory index). Its own writer marks what it writes; another daemon's commit
never passes through it. So every commit that writes entity rows also stores
their names, one row of ``journal_kv`` under the PostgreSQL-only sub-DB
:data:`CHANGES` keyed by the commit's first position, in the same transaction.
``postgres.watch``, which finds other daemons' commits, reads the names of those
it finds and marks exactly those rows (and their tables) written.

The rows are few bytes each and are trimmed as the journal grows: a commit
whose positions cross a multiple of :data:`TRIM_EVERY` deletes those more than
:data:`KEEP_POSITIONS` behind it, so the sub-DB stays bounded. A daemon that
falls further behind than that (its watcher lost the database for long) cannot
tell which rows changed and forgets its whole cache instead: slower, never stale.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from palyra.journal.format.record import u64_key
from palyra.journal.write.commitlog import Op

CHANGES = "_pg_entity_changes"
"""Not an LMDB sub-DB: the name starts with ``_``, so no entity table can take it."""

KEEP_POSITIONS = 65_536
TRIM_EVERY = 4_096

_TRIM = "DELETE FROM journal_kv WHERE db = %s AND key < %s"
_READ = "SELECT value FROM journal_kv WHERE db = %s AND key >= %s AND key <= %s"

Rows = list[tuple[str, str]]


def change_op(first_position: int, rows: Iterable[tuple[str, str]]) -> Op:
    """The op naming ``rows`` as written by the commit starting at ``first_position``."""
    names = sorted(rows)
    return (CHANGES, u64_key(first_position), msgspec.msgpack.encode(names))


def trim_due(first_position: int, next_position: int) -> bool:
    """Whether the commit of ``first_position..next_position - 1`` is the one crossing a
    multiple of :data:`TRIM_EVERY` (the one that trims)."""
    return (next_position - 1) // TRIM_EVERY > (first_position - 1) // TRIM_EVERY


def trim(conn: Any, first_position: int, next_position: int) -> None:
    """In a commit of ``first_position..next_position - 1``: drop the names kept too long,
    once per :data:`TRIM_EVERY` positions (the one commit crossing the multiple)."""
    if trim_due(first_position, next_position):
        horizon = max(0, first_position - KEEP_POSITIONS)
        conn.execute(_TRIM, (CHANGES, u64_key(horizon)))


def rows_written(conn: Any, head: int, ranges: Iterable[tuple[int, int]]) -> Rows | None:
    """The entity rows written by the commits starting in ``ranges`` (position pairs),
    read in the same snapshot as ``head`` (the last committed position); None when a
    range reaches back past what is surely kept, so the caller must forget everything."""
    spans = list(ranges)
    if any(first < head - KEEP_POSITIONS for first, _last in spans):
        return None
    out: Rows = []
    for first, last in spans:
        for (value,) in conn.execute(_READ, (CHANGES, u64_key(first), u64_key(last)),
                                     binary=True).fetchall():  # fmt: skip
            out += [(table, key) for table, key in msgspec.msgpack.decode(bytes(value))]
    return out
