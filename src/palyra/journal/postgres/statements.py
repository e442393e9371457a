"""The PostgreSQL writer's statements and the helpers that run them.

Every commit of ``postgres.writer`` is made of these: the locked transaction's
``BEGIN``, the head row's lock with the look-up of taken event ids (one round trip),
the look-ups of chain heads a commit needs, the writes with the head row's move and
the wake-up of other daemons, ``COMMIT``. Each statement's shape is chosen for how
PostgreSQL plans it; the comments say why. The lock-free commit's one statement is
``postgres.head_cas``'s.
"""

from __future__ import annotations

from typing import Any

import psycopg

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal import _env as names
from palyra.journal.format.record import key_u64, scoped_key, scoped_prefix
from palyra.journal.postgres import arrays
from palyra.journal.postgres.arrays import ByteaArray, TextArray
from palyra.journal.postgres.watch import CHANNEL
from palyra.journal.write.commitlog import Op

_MAX_U64 = (1 << 64) - 1

BEGIN = "BEGIN"
COMMIT = "COMMIT"
CLOCK = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
_LOCK_HEAD = "SELECT next_position, head FROM journal_head FOR UPDATE"
# The two look-ups by a list of keys descend the primary key once per key, by
# their shape: a nested loop over the array (LATERAL with LIMIT keeps the planner
# from turning it into a join it may plan otherwise). Written as ``db = $1 AND
# key = ANY($2)``, a young journal's missing statistics (autoanalyze had not yet
# run) made the planner estimate a sub-DB at a few rows and filter all of them:
# every commit read every row of ``_event_ids`` (one per event), 7.5 ms a commit
# after 12,000 events, so the server's CPU per step grew with the journal.
_TAKEN = (
    "SELECT t.key FROM unnest(%b::bytea[]) AS t(key) CROSS JOIN LATERAL "
    "(SELECT 1 FROM journal_kv j WHERE j.db = %s AND j.key = t.key LIMIT 1) AS found"
)
ROWS = (
    "SELECT t.key, found.value FROM unnest(%b::bytea[]) AS t(key) CROSS JOIN LATERAL "
    "(SELECT value FROM journal_kv j WHERE j.db = %s AND j.key = t.key LIMIT 1) AS found"
)
# A scope's last index key (its session or tape), and for a session the record it
# names, in one round trip: the readers' ``last_scoped_number`` (two cursor moves)
# and ``record_hash_at`` (a get) would take three for every session new to this writer.
_LAST_IN_SCOPE = (
    "SELECT key FROM journal_kv WHERE db = %s AND key >= %b AND key <= %b "
    "ORDER BY key DESC LIMIT 1"
)
_LAST_RECORD_IN_SCOPE = (
    "SELECT s.key, e.value FROM (" + _LAST_IN_SCOPE + ") AS s "
    "LEFT JOIN journal_kv e ON e.db = %s AND e.key = substring(s.key FROM %s)"
)
# The puts (``INSERT … ON CONFLICT DO UPDATE`` over ``unnest`` arrays), the head row's
# move and the other daemons' wake-up in one statement: the insert as a data-modifying
# CTE, which PostgreSQL runs to completion whether or not the main query reads it, and
# ``pg_notify`` (``NOTIFY`` as a function, queued until the transaction commits). One
# statement where there were two: each costs the writer's thread a query's conversion,
# dumping and result handling in psycopg.
_PUT_AND_MOVE_HEAD = (
    "WITH put AS (INSERT INTO journal_kv (db, key, value) "
    "SELECT * FROM unnest(%b::text[], %b::bytea[], %b::bytea[]) "
    "ON CONFLICT (db, key) DO UPDATE SET value = EXCLUDED.value), "
    "moved AS (UPDATE journal_head SET next_position = %s, head = %s RETURNING 1) "
    f"SELECT pg_notify('{CHANNEL}', '') FROM moved"
)
# The deletes, sent before it (their keys never overlap the puts': the last op on a key
# wins before either is built) and never prepared: psycopg prepares a statement the
# fifth time it runs, and PostgreSQL then keeps the generic plan made on the statistics
# of that moment. For a young journal that was a hash semi-join over a sequential scan
# of ``journal_kv``, kept while the table grew: every commit that deleted a row read the
# whole journal (16 ms of the server's CPU a commit after 100,000 rows, and growing).
# Planned at each run, the plan follows the table's size (the planner scales its
# statistics by the table's pages now), for a fraction of a millisecond.
_DELETE = (
    "DELETE FROM journal_kv WHERE (db, key) IN "
    "(SELECT * FROM unnest(%b::text[], %b::bytea[]))"
)


def connect(dsn: str) -> psycopg.Connection[Any]:
    # Autocommit: the writer sends its own BEGIN and COMMIT (see ``writer._attempt``).
    conn = psycopg.connect(dsn, autocommit=True)
    arrays.register(conn)  # the commit's rows go as arrays dumped in one pass
    return conn


def lock_head(conn: psycopg.Connection[Any],
               taken_of: tuple[list[bytes], set[bytes]] | None) -> tuple[int, bytes]:
    """Lock the head row and read it; with ``taken_of`` ``(event ids, taken)``, add to
    ``taken`` which of the ids the journal holds, asked in the same round trip (run once
    the lock is held, the look-up sees every commit before this one)."""
    locked = conn.execute(_LOCK_HEAD, binary=True)
    found = (conn.execute(_TAKEN, (taken_of[0], names.EVENT_IDS), binary=True)
             if taken_of is not None and taken_of[0] else None)
    row = locked.fetchone()
    if found is not None and taken_of is not None:
        taken_of[1].update(bytes(r[0]) for r in found.fetchall())
    if row is None:
        raise PalyraError("the PostgreSQL journal has no head row",
                          code=ErrorCode.JOURNAL_CORRUPT)
    return int(row[0]), bytes(row[1])


Rows = tuple[list[str], list[bytes], list[bytes], list[str], list[bytes]]
"""A plan's ops as rows: the puts' ``dbs, keys, values``, the deletes' ``dbs, keys``."""


def rows_of(ops: list[Op]) -> Rows:
    """Every op as a row; the last op on a key wins, as applying them in order would (so
    no key is both put and deleted)."""
    final: dict[tuple[str, bytes], bytes | None] = {}
    for name, key, value in ops:
        final[(name, bytes(key))] = None if value is None else bytes(value)
    put_dbs: list[str] = []
    put_keys: list[bytes] = []
    values: list[bytes] = []
    del_dbs: list[str] = []
    del_keys: list[bytes] = []
    for (db, key), value in final.items():
        if value is None:
            del_dbs.append(db)
            del_keys.append(key)
        else:
            put_dbs.append(db)
            put_keys.append(key)
            values.append(value)
    return put_dbs, put_keys, values, del_dbs, del_keys


def write_and_move_head(conn: psycopg.Connection[Any], ops: list[Op], next_position: int,
                         new_head: bytes) -> None:
    """Every op as a row and the head row moved to ``next_position``/``new_head``."""
    put_dbs, put_keys, values, del_dbs, del_keys = rows_of(ops)
    if del_keys:
        conn.execute(_DELETE, (TextArray(del_dbs), ByteaArray(del_keys)), prepare=False)
    conn.execute(_PUT_AND_MOVE_HEAD, (TextArray(put_dbs), ByteaArray(put_keys),
                                      ByteaArray(values), next_position, new_head))


def taken_keys(conn: psycopg.Connection[Any], db: str, keys: list[bytes]) -> set[bytes]:
    """Which of ``keys`` ``db`` holds (one index descent per key: see ``_TAKEN``)."""
    rows = conn.execute(_TAKEN, (keys, db), binary=True)
    return {bytes(row[0]) for row in rows}


def last_in_scope(
    conn: psycopg.Connection[Any], db: str, scope: str, records: str | None = None
) -> tuple[int, bytes | None]:
    """The largest number under ``scope`` in index ``db`` (-1 if none), as the readers'
    ``last_scoped_number`` finds it, and with ``records`` (the records' sub-DB) the record
    stored under that position (None if missing), in one statement."""
    prefix = scoped_prefix(scope)
    bounds = (db, prefix, scoped_key(scope, _MAX_U64))
    if records is None:
        row = conn.execute(_LAST_IN_SCOPE, bounds, binary=True).fetchone()
    else:
        row = conn.execute(_LAST_RECORD_IN_SCOPE, (*bounds, records, len(prefix) + 1),
                           binary=True).fetchone()  # fmt: skip
    if row is None or len(row[0]) != len(prefix) + 8:
        return -1, None
    raw = row[1] if records is not None else None
    return key_u64(bytes(row[0])), None if raw is None else bytes(raw)
