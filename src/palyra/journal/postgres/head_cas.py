"""A commit in one statement, made only if the head row still says what this writer knows.

The locked commit (``writer._attempt``) takes the head row with ``SELECT … FOR UPDATE``,
reads what it must, plans, writes and commits: two round trips while it holds the row,
and every daemon's commits wait for that row. When the writer committed last itself
(it knows the head row's value) and the batch needs nothing read under the lock (no
fence, no expected row), the plan can be made before any statement is sent, from that
knowledge; :data:`_IF_HEAD_IS` then writes it in one statement, run in autocommit as its
own transaction:

- ``moved``: the head row's move, compare-and-set on the ``(next_position, head)`` this
  writer committed, and on none of the batch's event ids being taken;
- ``deleted`` (when the plan deletes) and ``put``: the plan's rows, each written only if
  ``moved`` moved the row (a data-modifying CTE reading ``moved``'s output);
- ``pg_notify`` for the other daemons' followers, once per row moved.

If another daemon committed since, the row's values differ and nothing is written
(under ``READ COMMITTED`` the ``UPDATE`` re-reads a row changed under it and finds the
values changed; under ``REPEATABLE READ`` or ``SERIALIZABLE`` the database aborts it
with ``40001``). A taken event id also writes nothing: the writer then makes the
locked commit, which reads what changed and names which request clashed. Either way a
miss costs one round trip, and positions still come from the database's row: the
compare-and-set is the check that the writer's position is the database's.

Only row compare-and-set, no advisory lock: this is the same shape CockroachDB and
YugabyteDB run (``docs/journal/postgres.md``).
"""

from __future__ import annotations

from typing import Any

from palyra.journal.postgres.arrays import ByteaArray, TextArray
from palyra.journal.postgres.statements import Rows
from palyra.journal.postgres.watch import CHANNEL

_MOVED = (
    "moved AS (UPDATE journal_head SET next_position = %s, head = %s "
    "WHERE next_position = %s AND head = %s AND NOT EXISTS ("
    "SELECT 1 FROM unnest(%b::bytea[]) AS t(key) CROSS JOIN LATERAL "
    "(SELECT 1 FROM journal_kv j WHERE j.db = %s AND j.key = t.key LIMIT 1) AS found"
    ") RETURNING 1)"
)
_DELETED = (
    "deleted AS (DELETE FROM journal_kv WHERE (db, key) IN "
    "(SELECT * FROM unnest(%b::text[], %b::bytea[])) AND EXISTS (SELECT 1 FROM moved))"
)
_PUT = (
    "put AS (INSERT INTO journal_kv (db, key, value) "
    "SELECT * FROM unnest(%b::text[], %b::bytea[], %b::bytea[]) "
    "WHERE EXISTS (SELECT 1 FROM moved) "
    "ON CONFLICT (db, key) DO UPDATE SET value = EXCLUDED.value)"
)
_NOTIFY = f"SELECT pg_notify('{CHANNEL}', '') FROM moved"
_IF_HEAD_IS = f"WITH {_MOVED}, {_PUT} {_NOTIFY}"
_IF_HEAD_IS_DELETING = f"WITH {_MOVED}, {_DELETED}, {_PUT} {_NOTIFY}"


def write_if_head_is(
    conn: Any, known: tuple[int, bytes], moved_to: tuple[int, bytes],
    rows: Rows,
    event_ids: tuple[str, list[bytes]],
) -> bool:
    """Write ``rows`` (puts ``dbs, keys, values`` and deletes ``dbs, keys``) and move the
    head row from ``known`` to ``moved_to``, in one statement; True if it was written
    (committed: ``conn`` is in autocommit mode), False if the head row was not ``known``
    or one of ``event_ids`` (``(sub-DB, keys)``) is taken, when nothing was written."""
    put_dbs, put_keys, values, del_dbs, del_keys = rows
    moved = (moved_to[0], moved_to[1], known[0], known[1], ByteaArray(event_ids[1]),
             event_ids[0])
    puts = (TextArray(put_dbs), ByteaArray(put_keys), ByteaArray(values))
    if del_keys:
        # Never prepared, as the locked commit's ``DELETE`` (``statements._DELETE``): a generic
        # plan made on a young journal's statistics read the whole table every commit.
        cursor = conn.execute(_IF_HEAD_IS_DELETING,
                              (*moved, TextArray(del_dbs), ByteaArray(del_keys), *puts),
                              prepare=False)  # fmt: skip
    else:
        cursor = conn.execute(_IF_HEAD_IS, (*moved, *puts))
    return cursor.fetchone() is not None
