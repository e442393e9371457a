"""A read-through cache of entity rows, made stale per row by the one writer.

Hot reads (a session's postures on every tool call) would otherwise open an
LMDB read transaction and copy the row each time, though sessions change
rarely. The writer thread keeps one clock: after every durable commit that
writes entity rows (before the callers are answered) it notes the new clock
reading against each row written, then advances the clock. A reader notes the
clock *before* it reads LMDB and files the row under that reading; the row is
served only while nothing wrote it since. A commit landing during the read
writes its rows under a later reading, so a row that might predate it is never
served again: the cache can miss, never serve an old row.

The writer also refreshes the rows it wrote that are cached, with the values it
wrote, under the commit's own reading (write through): a hot row read again right
after a commit that wrote it (a run's row, a session's) is then a hit instead of an
LMDB read, which would wait until the writer applied the frame (reads of this
process wait for that; see ``JournalEnv.visible``) and block the event loop. Rows
nobody read are not added (they would push the hot ones out), except those of the
tables in :data:`FILED_ON_WRITE`: a session's row is read by its first run's first
turn right after the commit that created it, and a run's by whoever waits on the run
(``Engine.wait_run``), reads that would otherwise wait for LMDB to apply that commit
(on the loop's thread, and in a GIL hand-over to the writer) once per new run. A row
filed once is only refreshed by later writes, so this adds one entry per new session
or run, not one per commit.

Per row, not per table: every run commit writes its run row, and sessions
start all the time, so a table-wide version would make nearly every read a
miss under load.

The LMDB writer also notes how far LMDB holds the commits (``applied``: the clock
reading when its last LMDB commit landed). A row no commit wrote since then
(``settled``) is read from LMDB at once, without waiting for the writer to apply
later frames that did not touch it: a new session's row looked up, a row read once
per run.

Only a store with a writer in this process uses it. On PostgreSQL, where other
daemons commit to the same rows, their commits are marked here too, by the thread
that finds them (``postgres.watch``): a second thread calls :meth:`wrote`, so
marking takes a lock. A look is served from here only once the commits the
marking thread has found are marked, so another daemon's write is seen within
that thread's delay (a notification, at most its poll).

There (``shared``) an absent row is never filed: a row another daemon just created
would otherwise be reported absent until that thread marks it. A client answered
on one daemon with a new run's id, asking the next daemon for it, must find it, so
"not found" is always the database's answer, never this cache's; a row's value may
lag by the marking delay, its existence never does.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from palyra.core.key_filter import KeyFilter

DEFAULT_LIMIT = 4096
WRITE_THROUGH_BYTES = 2048
"""Written rows up to this size are filed as written; a larger one (an attachment, a
memory item's text) is only marked, so the cache never holds blobs nobody read."""
TRACKED_KEYS = {"sessions": "key:"}
"""Key ranges whose absent keys the cache answers for (``core/key_filter.py``): the engine's
session index, ``session_index_key`` (a new conversation's session looked up by key)."""
MAX_TRACKED_KEYS = 250_000
"""A range holding more keys than this at open gets no filter (its scan would slow the
opening): its absent keys are read, as before the filter."""
FILED_ON_WRITE = frozenset({"sessions", "runs"})
"""Tables whose written rows (up to :data:`WRITE_THROUGH_BYTES`) are filed even when
nobody read them yet: a new session or run is read again at once."""


class EntityCache:
    """``(table, key) -> (clock, value)`` and when each row was last written; bounded."""

    def __init__(self, limit: int = DEFAULT_LIMIT, *, shared: bool = False) -> None:
        self._limit = limit
        # Other daemons write the same rows: absent rows are not filed (see above).
        self._shared = shared
        self._clock = 0
        # A row written before ``_floor`` is no longer tracked: it counts as
        # written at ``_floor`` (which only makes older cached rows miss).
        self._floor = 0
        self._written: dict[tuple[str, str], int] = {}
        self._versions: dict[str, int] = {}
        # Every table's version is at least this (a commit whose rows are unknown).
        self._versions_floor = 0
        # How often other daemons' commits wrote each table (and commits not known).
        self._foreign: dict[str, int] = {}
        self._foreign_unknown = 0
        self._rows: dict[tuple[str, str], tuple[int, bytes | None]] = {}
        # Held while marking: the writer's thread and, on PostgreSQL, the thread
        # that finds other daemons' commits both mark (readers never wait for it).
        self._marking = threading.Lock()
        self._applied = 0  # every row written at or before this reading is in LMDB
        # table -> (key prefix, the keys of that range that may have a row): a key
        # it certainly lacks is not read (core/key_filter.py). Never where other daemons
        # write (``shared``): their rows reach this process only through a watcher.
        self._maybe: dict[str, tuple[str, KeyFilter]] = {}

    def track_keys(self, table: str, prefix: str, keys: list[str]) -> None:
        """Before any commit: ``keys`` are every key of ``table`` starting with ``prefix``
        that has a row; from now on a commit's keys there are added as it is marked."""
        if self._shared:
            return
        maybe = KeyFilter(len(keys))
        for key in keys:
            maybe.add(key)
        self._maybe[table] = (prefix, maybe)

    def absent(self, table: str, key: str) -> bool:
        """True only when no row of ``table``/``key`` exists (a tracked range's key that
        no commit wrote): it need not be read."""
        tracked = self._maybe.get(table)
        return tracked is not None and key.startswith(tracked[0]) and tracked[1].absent(key)

    def applied(self) -> None:
        """After an LMDB commit (writer thread only): every commit marked so far is in
        LMDB (the writer marks a commit's rows and queues its frame in one step)."""
        self._applied = self._clock

    def settled(self, table: str, key: str) -> bool:
        """Whether LMDB already holds the latest commit that wrote this row (a read of
        it need not wait for frames still being applied)."""
        return self._written.get((table, key), self._floor) <= self._applied

    def clock(self) -> int:
        """The clock reading to file a row under (note it before reading LMDB)."""
        return self._clock

    def version(self, table: str) -> int:
        """A number that changes whenever a commit writes ``table``."""
        return max(self._versions.get(table, 0), self._versions_floor)

    def foreign_writes(self, table: str) -> int:
        """A number that changes whenever another daemon's commit wrote ``table``."""
        return self._foreign.get(table, 0) + self._foreign_unknown

    def foreign_unknown(self) -> int:
        """A number that changes whenever other daemons' commits whose rows are not
        known were found (:meth:`wrote_unknown`)."""
        return self._foreign_unknown

    def get(self, table: str, key: str) -> tuple[bool, bytes | None]:
        """``(True, value)`` for a row nobody wrote since it was read."""
        row = (table, key)
        hit = self._rows.get(row)
        if hit is not None and self._written.get(row, self._floor) <= hit[0]:
            return True, hit[1]
        return False, None

    def put(self, table: str, key: str, clock: int, value: bytes | None) -> None:
        """File a row read after the clock read ``clock``."""
        if value is None and self._shared:
            return
        if len(self._rows) >= self._limit:
            self._rows.clear()
        self._rows[(table, key)] = (clock, value)

    def wrote(self, rows: Iterable[tuple[str, str]],
              values: Mapping[tuple[str, str], bytes | None] | None = None, *,
              foreign: bool = False) -> None:
        """After a durable commit that wrote ``rows`` (called by the writer's thread, or
        the one finding other daemons' commits, never by readers), with the
        ``values`` it left them holding (None: deleted), filed as read at the commit;
        ``foreign``: the commits were another daemon's."""
        with self._marking:
            if foreign:
                for table in {row[0] for row in rows}:
                    self._foreign[table] = self._foreign.get(table, 0) + 1
            self._wrote(rows, values)

    def wrote_unknown(self) -> None:
        """After another daemon's commits whose rows are not known (too far back to
        tell): every row read before now misses and every table's version moves."""
        with self._marking:
            self._foreign_unknown += 1
            self._maybe.clear()  # rows it was not told of: no key is certainly absent
            now = self._clock + 1
            self._floor = now
            self._written.clear()
            self._versions_floor = now
            self._clock = now

    def _wrote(self, rows: Iterable[tuple[str, str]],
               values: Mapping[tuple[str, str], bytes | None] | None) -> None:
        now = self._clock + 1
        written = self._written
        if len(written) >= self._limit:
            # Forget which rows were written when: every row read before now misses.
            self._floor = now
            written.clear()
        versions = self._versions
        maybe = self._maybe
        for row in rows:
            written[row] = now
            versions[row[0]] = now
            if maybe:
                tracked = maybe.get(row[0])
                if tracked is not None and row[1].startswith(tracked[0]):
                    tracked[1].add(row[1])
        if values:
            rows_cached = self._rows
            # Only rows someone reads (already cached) are refreshed: filing every row
            # written would fill the cache with rows nobody reads and push the hot ones
            # out. Served from the reading ``now`` on: a later commit marks it later.
            for row, value in values.items():
                if value is None and self._shared:
                    rows_cached.pop(row, None)
                elif (row in rows_cached or row[0] in FILED_ON_WRITE) and (
                        value is None or len(value) <= WRITE_THROUGH_BYTES):
                    if row not in rows_cached and len(rows_cached) >= self._limit:
                        rows_cached.clear()
                    rows_cached[row] = (now, value)
        # Advanced last: a reader that notes ``now`` reads after the rows above
        # were marked, and (JournalEnv.read waits for the commit) sees them.
        self._clock = now
