"""LMDB's read surface over PostgreSQL rows: the journal's readers run unchanged.

The read paths (``read.reads``), verification and export are written against
an environment's ``read()`` transaction, its ``dbs`` handles, and LMDB's
cursor moves (``first``, ``last``, ``set_range``, ``set_key``, ``next``,
``prev``, iteration). :class:`PostgresEnv` gives them exactly that over the
``journal_kv`` table (``schema``): a handle is the sub-DB's name, a read
transaction is a ``REPEATABLE READ READ ONLY`` PostgreSQL transaction (one
snapshot, like LMDB's), and a cursor fetches ordered pages of rows and moves
through them, so one verify walk is a few hundred queries, not one per record.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal._env import JournalEnv, journal_dir
from palyra.journal._types import JournalConfig
from palyra.journal.postgres.pointer import write_pointer

Row = tuple[bytes, bytes]

_FIRST_PAGE = 8  # a cursor that lands on one record reads few rows...
_MAX_PAGE = 512  # ...one that walks doubles its page up to this many

_READ_WAIT_S = 5.0  # longest a read waits for a pooled connection (the event loop waits too)

_AFTER = "SELECT key, value FROM journal_kv WHERE db = %s AND key > %s ORDER BY key LIMIT %s"
_FROM = "SELECT key, value FROM journal_kv WHERE db = %s AND key >= %s ORDER BY key LIMIT %s"
_BEFORE = "SELECT key, value FROM journal_kv WHERE db = %s AND key < %s ORDER BY key DESC LIMIT %s"
_LAST = "SELECT key, value FROM journal_kv WHERE db = %s ORDER BY key DESC LIMIT %s"
_GET = "SELECT value FROM journal_kv WHERE db = %s AND key = %s"


class SubDbNames(dict[str, str]):
    """``env.dbs``: a sub-DB's handle is its name, for every name (a new one needs no setup)."""

    def __missing__(self, name: str) -> str:
        return name

    def get(self, name: str, default: object = None) -> str:
        """Every sub-DB exists (readers that ``get`` an optional one, like the tree's, find it)."""
        return self[name]


class PgTxn:
    """One PostgreSQL transaction seen as an LMDB transaction (``get`` and ``cursor``)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def rows(self, query: str, params: tuple[object, ...]) -> list[Row]:
        """Run one read; ``(key, value)`` rows as ``bytes``."""
        return self.conn.execute(query, params, binary=True).fetchall()

    def get(self, key: bytes, db: str) -> bytes | None:
        """The value under ``key`` in sub-DB ``db``, or None."""
        row = self.conn.execute(_GET, (db, bytes(key)), binary=True).fetchone()
        return None if row is None else bytes(row[0])

    def cursor(self, db: str) -> PgCursor:
        """An unpositioned cursor over sub-DB ``db``."""
        return PgCursor(self, db)


class PgWriteTxn(PgTxn):
    """A :class:`PgTxn` whose ``put``/``delete`` are kept as ops for the writer to apply.

    For code written against an LMDB write transaction that reads first and
    writes after (retention's tombstones): its reads never need its own writes.
    """

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        super().__init__(conn)
        self.ops: list[tuple[str, bytes, bytes | None]] = []

    def put(self, key: bytes, value: bytes, db: str, overwrite: bool = True) -> bool:
        """Queue a put (``overwrite`` is LMDB's; the writer's ops always overwrite)."""
        self.ops.append((db, bytes(key), bytes(value)))
        return True

    def delete(self, key: bytes, db: str) -> bool:
        """Queue a delete."""
        self.ops.append((db, bytes(key), None))
        return True


class PgCursor:
    """An LMDB cursor over one sub-DB: a page of consecutive rows and a place in it.

    The page is always a contiguous, ascending run of the sub-DB's keys, so a
    step within it needs no query; stepping off either end reads the next page
    that way (doubling in size while the cursor keeps walking).
    """

    def __init__(self, txn: PgTxn, db: str) -> None:
        self._txn = txn
        self._db = db
        self._page: list[Row] = []
        self._at = -1  # -1: unpositioned
        self._size = _FIRST_PAGE

    def _land(self, rows: list[Row], at: int) -> bool:
        self._page = rows
        self._at = at if rows else -1
        return bool(rows)

    def _grow(self) -> int:
        size, self._size = self._size, min(self._size * 2, _MAX_PAGE)
        return size

    def first(self) -> bool:
        """Move to the first row; False when the sub-DB is empty."""
        return self.set_range(b"")

    def last(self) -> bool:
        """Move to the last row; False when the sub-DB is empty."""
        self._size = _FIRST_PAGE
        rows = self._txn.rows(_LAST, (self._db, self._grow()))
        rows.reverse()
        return self._land(rows, len(rows) - 1)

    def set_range(self, key: bytes) -> bool:
        """Move to the first row with a key >= ``key``; False when there is none."""
        self._size = _FIRST_PAGE
        return self._land(self._txn.rows(_FROM, (self._db, bytes(key), self._grow())), 0)

    def set_key(self, key: bytes) -> bool:
        """Move to ``key`` exactly; False (unpositioned) when it is absent."""
        value = self._txn.get(key, self._db)
        return self._land([] if value is None else [(bytes(key), value)], 0)

    def next(self) -> bool:
        """Step forward; False (unpositioned) past the last row."""
        if self._at < 0:
            return self.first()
        if self._at + 1 < len(self._page):
            self._at += 1
            return True
        key = self._page[self._at][0]
        return self._land(self._txn.rows(_AFTER, (self._db, key, self._grow())), 0)

    def prev(self) -> bool:
        """Step back; False (unpositioned) before the first row."""
        if self._at < 0:
            return self.last()
        if self._at > 0:
            self._at -= 1
            return True
        key = self._page[0][0]
        rows = self._txn.rows(_BEFORE, (self._db, key, self._grow()))
        rows.reverse()
        return self._land(rows, len(rows) - 1)

    def key(self) -> bytes:
        """The current key (empty when unpositioned, as LMDB)."""
        return self._page[self._at][0] if self._at >= 0 else b""

    def value(self) -> bytes:
        """The current value (empty when unpositioned, as LMDB)."""
        return self._page[self._at][1] if self._at >= 0 else b""

    def iternext(self, keys: bool = True, values: bool = True) -> Iterator[Any]:
        """From the current row (the first when unpositioned) to the end, as py-lmdb."""
        if self._at < 0 and not self.first():
            return
        while True:
            key, value = self._page[self._at]
            if keys and values:
                yield key, value
            elif keys:
                yield key
            else:
                yield value
            if not self.next():
                return

    def __iter__(self) -> Iterator[Row]:
        return self.iternext()


class PostgresEnv(JournalEnv):
    """A journal environment whose sub-DBs are rows of a PostgreSQL database.

    A subclass so the readers typed against ``JournalEnv`` take it; it shares
    none of LMDB's state (no map, no commit log, no writer lock: PostgreSQL
    serialises writers, see ``postgres.writer``). ``path`` still names the data
    dir's ``journal/`` directory: the daemon's checkpoint signing key lives there.
    """

    def __init__(self, data_dir: Path, config: JournalConfig) -> None:
        # JournalEnv.__init__ opens LMDB: set its public surface here instead.
        self.data_dir = data_dir
        self.path = journal_dir(data_dir)
        self.config = config
        self.durable = None
        self.unapplied = None
        self.on_wait = None
        self.map_grows = 0
        self.closed = False
        self.dbs = SubDbNames()
        if not config.dsn:
            raise PalyraError("[journal] backend = \"postgres\" needs a dsn",
                              code=ErrorCode.CONFIG_INVALID)
        if not config.readonly:
            for directory in (data_dir, self.path):
                directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            write_pointer(self.path, config.dsn)
        self.pool = ConnectionPool(
            config.dsn,
            min_size=1,
            max_size=max(1, config.pool_size),
            configure=_reader,
            open=False,
            name="palyra-journal-read",
        )
        try:
            self.pool.open(wait=True, timeout=30.0)
        except Exception as exc:
            self.pool.close()
            raise PalyraError(f"cannot connect to the PostgreSQL journal: {exc}",
                              code=ErrorCode.UNAVAILABLE) from exc

    @contextlib.contextmanager
    def read(self, *, wait: bool = True) -> Iterator[Any]:
        """One snapshot read transaction (``wait`` is LMDB's: a commit here is in
        PostgreSQL when it is answered, so there is nothing to wait for).

        Raises:
            PalyraError: ``UNAVAILABLE`` once the store is closed.
        """
        if self.closed:
            raise PalyraError("the journal is closed", code=ErrorCode.UNAVAILABLE)
        try:
            with self.pool.connection(timeout=_READ_WAIT_S) as conn:
                yield PgTxn(conn)
        except (psycopg.OperationalError, PoolTimeout) as exc:
            # Reads run on the event loop: a lost database fails them fast and plainly.
            raise PalyraError(f"the PostgreSQL journal is unreachable: {exc}",
                              code=ErrorCode.UNAVAILABLE) from exc

    @property
    def map_size(self) -> int:
        """No LMDB map here."""
        return 0

    def grow(self) -> None:
        """No LMDB map here."""

    def close(self) -> None:
        """Close the connection pool."""
        if self.closed:
            return
        self.closed = True
        self.pool.close()


def _reader(conn: psycopg.Connection[Any]) -> None:
    # Each ``read()`` is one snapshot, as an LMDB read transaction.
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    conn.read_only = True
