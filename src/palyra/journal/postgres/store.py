"""``PostgresJournalStore``: the journal's facade over PostgreSQL.

The same class as LMDB's ``JournalStore`` from the application's side (a
subclass: every read path, follower and answer is inherited); only the
environment (``postgres.kv``) and the writer (``postgres.writer``) differ.
The entity cache is on, as on LMDB: this daemon's writer marks the rows it
writes, and ``postgres.watch`` marks the rows other daemons' commits wrote
(named in the database with each commit, ``postgres.changes``) before it
hands those commits to this daemon's followers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psycopg

from palyra.journal._store import JournalStore
from palyra.journal._types import JournalConfig, Lease
from palyra.journal.postgres.kv import PostgresEnv
from palyra.journal.postgres.lease import Leases
from palyra.journal.postgres.schema import migrate, require_current
from palyra.journal.postgres.statements import CLOCK
from palyra.journal.postgres.watch import _HEAD, NOTIFY, ForeignCommits, OwnCommits
from palyra.journal.postgres.writer import PostgresWriter
from palyra.journal.read.entity_cache import EntityCache
from palyra.journal.read.follow import FollowHub


class PostgresJournalStore(JournalStore):
    """The journal in a PostgreSQL database (``[journal] backend = "postgres"``)."""

    def __init__(self, env: PostgresEnv, config: JournalConfig) -> None:
        # Not JournalStore.__init__: it starts the LMDB writer.
        self._env = env
        self._config = config
        self._hub = FollowHub(config.follow_buffer_events, config.follow_buffer_bytes)
        self._writer = None
        self._signer = None
        self._closed = False
        self._entities = None
        self._leases = Leases(config.dsn)
        self._watch: ForeignCommits | None = None
        if not config.readonly:
            own = OwnCommits()
            self._entities = EntityCache(shared=True)
            self._writer = PostgresWriter(env, config.max_batch_events, self._hub.deliveries,
                                          self._hub.followed, own, self._entities.wrote)
            # Other daemons' commits reach this daemon's followers and cache too.
            self._watch = ForeignCommits(env, self._hub, own, self._entities)

    @classmethod
    def open_postgres(cls, data_dir: Path, config: JournalConfig) -> PostgresJournalStore:
        """Connect, migrate (or, read-only, check) the schema, start the writer.

        Raises:
            PalyraError: ``UNAVAILABLE`` when the database cannot be reached,
                ``UNSUPPORTED_VERSION`` on a schema of another version,
                ``NOT_FOUND`` read-only on a database without a journal.
        """
        env = PostgresEnv(Path(data_dir), config)
        try:
            with psycopg.connect(config.dsn, autocommit=True) as conn:
                if config.readonly:
                    require_current(conn)
                else:
                    migrate(conn)
            return cls(env, config)
        except BaseException:
            env.close()
            raise

    def on_foreign_rows(self, listener: Callable[[list[tuple[str, str]]], None]) -> None:
        """Call ``listener`` with the ``(table, key)`` rows other daemons' commits wrote,
        on the watcher's thread, after this daemon's cache marked them (a read made
        after the call sees them). It must be quick and thread-safe; it may miss rows
        only when the watcher fell too far behind to know (then the whole cache is
        dropped, and a listener that must not miss should also read what it holds)."""
        if self._watch is not None:
            self._watch.row_listeners.append(listener)

    def on_foreign_unknown(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (on the watcher's thread, after the whole cache was dropped)
        when other daemons' commits were found whose rows could not be told."""
        if self._watch is not None:
            self._watch.unknown_listeners.append(listener)

    @property
    def shared(self) -> bool:
        """Other daemons may write this database too."""
        return True

    def database_time_ms(self) -> int:
        """The database server's clock now (one round trip on a reader's connection).

        Raises:
            PalyraError: ``UNAVAILABLE`` when the database cannot be reached.
        """
        with self._env.read() as txn:
            row = txn.conn.execute(CLOCK).fetchone()
        return int(row[0])

    def acquire_lease(self, name: str, owner: str, ttl_s: float) -> Lease | None:
        """A new term on ``name`` for ``owner`` if it is free, expired or ``owner``'s already.

        Every term has a higher epoch than the last; pass the lease as
        ``append(..., fence=lease)`` to write only while it holds.
        """
        return self._leases.acquire(name, owner, ttl_s)

    def catch_up_with_others(self, timeout_s: float = 2.0) -> None:
        """Make this daemon's caches hold every commit made so far by any daemon.

        A row cached here is marked stale by the watcher within its delay (a
        notification, at most its poll). A daemon that has just taken a session's
        lease reads that session's rows as their last word, so it first waits for
        the watcher to reach the database's head now; if it cannot within
        ``timeout_s``, the whole cache is forgotten instead (never a stale row).
        """
        if self._watch is None or self._entities is None:
            return
        rows = self._leases.autocommit(_HEAD)
        head = int(rows[0][0]) - 1 if rows else 0
        self._leases.autocommit(NOTIFY)  # wakes the watcher now rather than at its poll
        if not self._watch.wait_seen(head, timeout_s):
            self._entities.wrote_unknown()

    def renew_lease(self, lease: Lease, ttl_s: float) -> bool:
        """Extend ``lease``; False when it expired or another daemon took it over."""
        return self._leases.renew(lease, ttl_s)

    def release_lease(self, lease: Lease, *, settled: bool = False) -> None:
        """End ``lease`` now (a clean shutdown), so a takeover need not wait for its expiry.

        ``settled``: nothing under the name is left to recover (not an orphan).
        """
        self._leases.release(lease, settled=settled)

    def renew_leases(self, owner: str, leases: list[Lease], ttl_s: float) -> set[str]:
        """Extend each of ``owner``'s unexpired ``leases`` in one statement; the names renewed."""
        return self._leases.renew_many(owner, leases, ttl_s)

    def orphaned_leases(self, prefix: str, limit: int = 1000) -> list[str]:
        """Names under ``prefix`` whose owner's term ended with work left (takeover candidates)."""
        return self._leases.orphans(prefix, limit)

    def lease_holder(self, name: str) -> tuple[str, int, bool] | None:
        """``(owner, epoch, unexpired)`` of ``name``'s lease, or None."""
        return self._leases.holder(name)

    def close(self) -> None:
        """Stop the writer, then close the lease connection and the readers' pool."""
        closing = not self._closed
        if closing and self._watch is not None:
            self._watch.stop()
        super().close()
        if closing:
            self._leases.close()

    def map_used(self) -> int:
        """No LMDB map here."""
        return 0


def open_store(data_dir: Path, config: JournalConfig) -> PostgresJournalStore:
    """``JournalStore.open`` for ``backend = "postgres"`` (see ``_store._BACKEND_MODULES``)."""
    return PostgresJournalStore.open_postgres(data_dir, config)
