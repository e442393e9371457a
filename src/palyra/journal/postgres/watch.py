"""Other daemons' commits, handed to this daemon's followers (``WatchRun``, SSE tails).

A follower is fed from memory by its own daemon's writer; commits made by
another daemon on the same database never pass through it. This thread finds
them: it waits for a ``NOTIFY`` (each commit sends one, delivered when it
commits) or for ``POLL_S`` at most, since a notification can be lost (a dropped
connection) and correctness must not depend on it. It then reads the head row,
reads every position it has not seen that this daemon's writer did not write
itself, and publishes those events to the hub in position order.

The same thread keeps this daemon's caches true to those commits: before it
publishes them, it marks the entity rows they wrote (their names are stored with
each commit, ``postgres.changes``) in the store's entity cache, which also moves
the versions of their tables (bindings, the memory index). A follower woken by
another daemon's event therefore reads that commit's rows, never older ones.

Followers already drop an event at or below their cursor and go back to the
store on a gap, so a foreign event delivered after one of this daemon's own
(the two threads do not order their deliveries) costs a store read, never a
lost or repeated event.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from palyra.journal import _env as names
from palyra.journal._types import StoredEvent
from palyra.journal.format.record import decode_record, u64_key
from palyra.journal.postgres.changes import rows_written
from palyra.journal.postgres.kv import PgTxn, PostgresEnv
from palyra.journal.read.entity_cache import EntityCache
from palyra.journal.read.follow import FollowHub

_log = logging.getLogger("palyra.journal")

CHANNEL = "palyra_journal"
POLL_S = 0.25
"""Longest a foreign commit waits to reach this daemon's followers when a notification is lost."""

NOTIFY = f"NOTIFY {CHANNEL}"
_HEAD = "SELECT next_position FROM journal_head"


class OwnCommits:
    """Position ranges this daemon's writer committed (and so delivered itself).

    The writer registers a commit's range before ``COMMIT`` (:meth:`begin`) and
    then confirms or discards it, so the watcher, woken by that very commit's
    notification, never takes the writer's own events for another daemon's; while a
    range is pending the watcher stops short of it and looks again later.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ranges: list[tuple[int, int]] = []
        self._pending: tuple[int, int] | None = None

    def begin(self, first: int, last: int) -> None:
        """The writer is about to commit positions ``first..last``."""
        with self._lock:
            self._pending = (first, last)

    def confirm(self) -> None:
        """The pending commit is durable."""
        with self._lock:
            if self._pending is not None:
                self._ranges.append(self._pending)
                self._pending = None

    def discard(self) -> None:
        """The pending commit failed: its positions are not this daemon's."""
        with self._lock:
            self._pending = None

    def add(self, first: int, last: int) -> None:
        """The writer committed positions ``first..last``."""
        with self._lock:
            self._ranges.append((first, last))

    def foreign(self, after: int, through: int) -> tuple[list[tuple[int, int]], int]:
        """The ranges of ``after+1..through`` this daemon did not write, and how far that
        answer is final (short of a pending commit's first position); forgets older ranges."""
        with self._lock:
            if self._pending is not None and self._pending[0] <= through:
                through = self._pending[0] - 1
            own = sorted(r for r in self._ranges if r[1] > after)
            self._ranges = [r for r in own if r[1] > through]
        gaps: list[tuple[int, int]] = []
        at = after + 1
        for first, last in own:
            if first > through:
                break
            if first > at:
                gaps.append((at, first - 1))
            at = max(at, last + 1)
        if at <= through:
            gaps.append((at, through))
        return gaps, max(after, through)


class ForeignCommits:
    """The thread that publishes other daemons' commits to ``hub`` and marks their rows."""

    def __init__(self, env: PostgresEnv, hub: FollowHub, own: OwnCommits,
                 cache: EntityCache | None = None) -> None:
        self._env = env
        self._hub = hub
        self._own = own
        self._cache = cache
        self._stop = threading.Event()
        # Called on this thread with the rows each round of other daemons' commits
        # wrote, once they are marked (``JournalStore.on_foreign_rows``).
        self.row_listeners: list[Callable[[list[tuple[str, str]]], None]] = []
        # Called on this thread when commits were found whose rows cannot be told
        # (``JournalStore.on_foreign_unknown``), once the whole cache is dropped.
        self.unknown_listeners: list[Callable[[], None]] = []
        self._conn = self._listen()
        row = self._conn.execute(_HEAD).fetchone()
        self._seen = int(row[0]) - 1 if row else 0  # positions through this were handled
        # Wakes :meth:`wait_seen` callers each time ``_seen`` moves.
        self._moved = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="palyra-journal-pg-watch",
                                        daemon=True)  # fmt: skip
        self._thread.start()

    def _listen(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self._env.config.dsn, autocommit=True)
        conn.execute(f"LISTEN {CHANNEL}")
        return conn

    def stop(self) -> None:
        """End the thread (within ``POLL_S``) and close its connection."""
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = self._conn
        try:
            while not self._stop.is_set():
                try:
                    if conn is None:  # the database went away: a new connection, when it can
                        conn = self._conn = self._listen()
                    self._wait()
                    self.catch_up()
                except psycopg.Error:
                    if conn is not None:
                        conn.close()
                    conn = None
                    self._stop.wait(POLL_S)
        finally:
            if conn is not None:
                conn.close()

    def _wait(self) -> None:
        for _ in self._conn.notifies(timeout=POLL_S, stop_after=1):
            pass

    def catch_up(self) -> None:
        """Mark, then publish, every committed position not seen yet that another daemon wrote."""
        # The head on the listening connection: one cheap query per wake-up, which
        # is all there is when only this daemon writes (it wakes for its own commits).
        row = self._conn.execute(_HEAD).fetchone()
        head = int(row[0]) - 1 if row else 0
        if head <= self._seen:
            return
        gaps, through = self._own.foreign(self._seen, head)
        published: list[list[tuple[StoredEvent, int]]] = []
        followed = self._hub.followed()
        if gaps and (self._cache is not None or followed):
            # One snapshot for the rows' names and the events (it holds every
            # position through ``head``, and maybe later ones, left for the next look).
            with self._env.read() as txn:
                if self._cache is not None:
                    self._mark(txn, gaps)
                if followed:
                    published = [self._read(txn, first, last) for first, last in gaps]
        for events in published:
            self._hub.publish(events)
        with self._moved:
            self._seen = through
            self._moved.notify_all()

    def wait_seen(self, position: int, timeout_s: float) -> bool:
        """Wait until every commit through ``position`` is marked and published (False:
        ``timeout_s`` passed first). The caller wakes the thread with a ``NOTIFY``."""
        with self._moved:
            return self._moved.wait_for(lambda: self._seen >= position, timeout_s)

    def _mark(self, txn: PgTxn, gaps: list[tuple[int, int]]) -> None:
        assert self._cache is not None
        # The snapshot's own head: the names kept are judged against the trims it sees.
        row = txn.conn.execute(_HEAD).fetchone()
        rows = rows_written(txn.conn, int(row[0]) - 1 if row else 0, gaps)
        if rows is None:  # too far behind to know which rows: forget them all
            self._cache.wrote_unknown()
            for heard in list(self.unknown_listeners):
                try:
                    heard()
                except Exception:  # a listener's bug must not stop the marking
                    _log.exception("a foreign-unknown listener failed")
        elif rows:
            self._cache.wrote(rows, foreign=True)
            for listener in list(self.row_listeners):
                try:
                    listener(rows)
                except Exception:  # a listener's bug must not stop the marking
                    _log.exception("a foreign-rows listener failed")

    def _read(self, txn: PgTxn, first: int, last: int) -> list[tuple[StoredEvent, int]]:
        """``(event, size)`` of positions ``first..last``, from the records holding them."""
        out: list[tuple[StoredEvent, int]] = []
        cursor = txn.cursor(db=self._env.dbs[names.EVENTS])
        if not cursor.set_range(u64_key(first)):
            return out
        for _key, value in cursor:
            record = decode_record(value)
            out += [(e, size) for e, size in record.sized_events()
                    if first <= e.position <= last]  # fmt: skip
            if record.last >= last:
                break
        return out
