"""Leases with fencing epochs: which daemon owns a name (a session), by row compare-and-set.

A lease row holds ``(name, owner, epoch, expires_at)``, with PostgreSQL's clock.
Acquiring succeeds only on a free or expired row (or one the caller holds) and
always starts a new term: ``epoch + 1``. Renewing extends only the caller's own
term. The epoch is the fence: a fenced append (``JournalStore.append(...,
fence=lease)``) is checked against the row inside the commit's transaction,
with the row locked ``FOR SHARE``, so a daemon whose lease was taken over
cannot write even if it has not noticed yet, and a takeover waits for any
commit still holding the old term. Only row compare-and-set: no advisory lock,
so the same statements run on CockroachDB and YugabyteDB.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from palyra.journal._types import Lease

# ``before`` reads the row as the statement's snapshot saw it (a statement never sees
# its own changes): the owner of the term this one follows. Should a concurrent change
# land between that snapshot and the row lock, it could only have ended a term (a
# release), so the answer errs toward an owner that needs no resuming, never away from
# one that does.
_ACQUIRE = (
    "WITH before AS (SELECT owner FROM journal_lease WHERE name = %(name)s) "
    "INSERT INTO journal_lease AS l (name, owner, epoch, expires_at) "
    "VALUES (%(name)s, %(owner)s, 1, now() + make_interval(secs => %(ttl)s)) "
    "ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, epoch = l.epoch + 1, "
    "expires_at = EXCLUDED.expires_at "
    "WHERE l.expires_at <= now() OR l.owner = EXCLUDED.owner "
    "RETURNING epoch, (SELECT owner FROM before)"
)
_RENEW = (
    "UPDATE journal_lease SET expires_at = now() + make_interval(secs => %(ttl)s) "
    "WHERE name = %(name)s AND owner = %(owner)s AND epoch = %(epoch)s AND expires_at > now() "
    "RETURNING epoch"
)
_RELEASE = (
    "UPDATE journal_lease SET expires_at = now() "
    "WHERE name = %(name)s AND owner = %(owner)s AND epoch = %(epoch)s"
)
# A settled release also clears the owner: nothing under the name is left to
# recover, so other daemons' orphan sweeps skip it (the epoch stays: it fences).
_SETTLE = (
    "UPDATE journal_lease SET expires_at = now(), owner = '' "
    "WHERE name = %(name)s AND owner = %(owner)s AND epoch = %(epoch)s"
)
_RENEW_MANY = (
    "UPDATE journal_lease SET expires_at = now() + make_interval(secs => %(ttl)s) "
    "WHERE owner = %(owner)s AND expires_at > now() AND (name, epoch) IN "
    "(SELECT * FROM unnest(%(names)s::text[], %(epochs)s::bigint[])) RETURNING name"
)
_ORPHANS = (
    "SELECT name FROM journal_lease WHERE expires_at <= now() AND owner <> '' "
    "AND name LIKE %(prefix)s ORDER BY expires_at LIMIT %(limit)s"
)
_HOLDER = "SELECT owner, epoch, expires_at > now() FROM journal_lease WHERE name = %s"
FENCES = "SELECT name, epoch FROM journal_lease WHERE name = ANY(%s) FOR SHARE"
"""The writer's check: the current epoch of each fenced name, locked until its commit."""


class Leases:
    """Lease compare-and-sets on one autocommit connection of their own."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None

    def _run(self, query: str, params: Any) -> list[tuple[Any, ...]]:
        with self._lock:
            if self._conn is None or self._conn.closed or self._conn.broken:
                self._conn = psycopg.connect(self._dsn, autocommit=True)
            cursor = self._conn.execute(query, params)
            return cursor.fetchall() if cursor.description is not None else []

    def autocommit(self, query: str) -> list[tuple[Any, ...]]:
        """Run ``query`` on this autocommit connection (a ``NOTIFY`` here is sent at once)."""
        return self._run(query, None)

    def acquire(self, name: str, owner: str, ttl_s: float) -> Lease | None:
        """A new term for ``owner`` if ``name`` is free, expired or already ``owner``'s.

        The lease names the owner of the term before it when that term ended
        unsettled (``Lease.previous_owner``): its work under the name is the new
        term's to resume.
        """
        rows = self._run(_ACQUIRE, {"name": name, "owner": owner, "ttl": ttl_s})
        if not rows:
            return None
        return Lease(name, owner, int(rows[0][0]), previous_owner=str(rows[0][1] or ""))

    def renew(self, lease: Lease, ttl_s: float) -> bool:
        """Extend ``lease``'s term; False when it expired or was taken over (stop writing)."""
        params = {"name": lease.name, "owner": lease.owner, "epoch": lease.epoch, "ttl": ttl_s}
        return bool(self._run(_RENEW, params))

    def release(self, lease: Lease, *, settled: bool = False) -> None:
        """End ``lease``'s term now, so another daemon can take over without waiting.

        ``settled``: nothing under the name needs recovering (its owner's work
        ended), so :meth:`orphans` does not list it.
        """
        self._run(_SETTLE if settled else _RELEASE,
                  {"name": lease.name, "owner": lease.owner, "epoch": lease.epoch})

    def renew_many(self, owner: str, leases: list[Lease], ttl_s: float) -> set[str]:
        """Extend each of ``owner``'s unexpired ``leases`` (one statement); the names renewed."""
        if not leases:
            return set()
        rows = self._run(_RENEW_MANY, {"owner": owner, "ttl": ttl_s,
                                       "names": [lease.name for lease in leases],
                                       "epochs": [lease.epoch for lease in leases]})
        return {str(row[0]) for row in rows}

    def orphans(self, prefix: str, limit: int) -> list[str]:
        """Names under ``prefix`` whose owner's term ran out (or was released) unsettled.

        These are the names another daemon should take over: its owner died or
        stopped with work still under them.
        """
        rows = self._run(_ORPHANS, {"prefix": prefix.replace("%", r"\%").replace("_", r"\_")
                                    + "%", "limit": limit})
        return [str(row[0]) for row in rows]

    def holder(self, name: str) -> tuple[str, int, bool] | None:
        """``(owner, epoch, unexpired)`` of ``name``'s lease row, or None."""
        rows = self._run(_HOLDER, (name,))
        return (str(rows[0][0]), int(rows[0][1]), bool(rows[0][2])) if rows else None

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
