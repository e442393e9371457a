"""Versioned schema migrations, applied or checked when a store opens.

Every sub-DB of the LMDB layout (the log, its indexes, checkpoints, entity
tables, and any the planner adds later) is one ``db`` value of a single
key-value table with LMDB's byte order on ``key`` (``bytea`` compares like
``memcmp``), so a new kind of write needs no migration. ``journal_head`` is
the one row every commit locks: it serialises the daemons' commits and holds
the next position and the global head hash.

A migration claims its version by inserting it into ``palyra_schema`` in the
same transaction as its DDL: two daemons starting at once serialise on that
primary key (the loser sees a unique violation, rolls back and finds the
version applied), with no advisory lock, so CockroachDB and YugabyteDB do the
same.
"""

from __future__ import annotations

import contextlib

import psycopg
from psycopg import errors as pg_errors

from palyra.core.chain import GENESIS
from palyra.core.errors import ErrorCode, PalyraError

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        'CREATE TABLE journal_kv (db text COLLATE "C" NOT NULL, key bytea NOT NULL, '
        "value bytea NOT NULL, PRIMARY KEY (db, key))",
        "CREATE TABLE journal_head (one boolean PRIMARY KEY DEFAULT true CHECK (one), "
        "next_position bigint NOT NULL, head bytea NOT NULL)",
        # The genesis head: a literal, so the migration is plain SQL.
        f"INSERT INTO journal_head (next_position, head) VALUES (1, '\\x{GENESIS.hex()}')",
    ),
    (
        # Leases with fencing epochs (``postgres.lease``).
        "CREATE TABLE journal_lease (name text PRIMARY KEY, owner text NOT NULL, "
        "epoch bigint NOT NULL, expires_at timestamptz NOT NULL)",
    ),
)
"""Version N is ``MIGRATIONS[N - 1]``; append, never edit."""

SCHEMA_VERSION = len(MIGRATIONS)

_VERSIONS = (
    "CREATE TABLE IF NOT EXISTS palyra_schema (version integer PRIMARY KEY, "
    "applied_at timestamptz NOT NULL DEFAULT now())"
)


def stored_version(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    """The highest applied version (0 on an empty database)."""
    found = conn.execute("SELECT to_regclass('palyra_schema') IS NOT NULL").fetchone()
    if not found or not found[0]:
        return 0
    row = conn.execute("SELECT coalesce(max(version), 0) FROM palyra_schema").fetchone()
    return int(row[0]) if row else 0  # type: ignore[call-overload]


def _too_new(version: int) -> PalyraError:
    return PalyraError(
        f"the PostgreSQL journal's schema is version {version}, newer than this palyra "
        f"(it knows up to {SCHEMA_VERSION}): upgrade palyra",
        code=ErrorCode.UNSUPPORTED_VERSION,
        details={"schema_version": str(version), "known_version": str(SCHEMA_VERSION)},
    )


def migrate(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    """Apply every missing migration, one transaction each; return the version.

    ``conn`` must be in autocommit mode (each migration opens its own transaction).

    Raises:
        PalyraError: ``UNSUPPORTED_VERSION`` when the database is newer than this code.
    """
    # IF NOT EXISTS is not race-free: another daemon may create it at the same moment.
    with contextlib.suppress(
        pg_errors.UniqueViolation, pg_errors.DuplicateObject, pg_errors.DuplicateTable
    ):
        conn.execute(_VERSIONS)
    while True:
        version = stored_version(conn)
        if version > SCHEMA_VERSION:
            raise _too_new(version)
        if version == SCHEMA_VERSION:
            return version
        try:
            with conn.transaction():
                conn.execute("INSERT INTO palyra_schema (version) VALUES (%s)", (version + 1,))
                for statement in MIGRATIONS[version]:
                    conn.execute(statement.encode())
        except (pg_errors.UniqueViolation, pg_errors.DuplicateTable, pg_errors.DuplicateObject):
            continue  # another daemon applied it first: look again


def require_current(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """For a read-only open: the schema must be exactly this code's (nothing is migrated).

    Raises:
        PalyraError: ``NOT_FOUND`` on a database without a journal,
            ``UNSUPPORTED_VERSION`` on one of another version.
    """
    version = stored_version(conn)
    if version == 0:
        raise PalyraError("the PostgreSQL database holds no palyra journal",
                          code=ErrorCode.NOT_FOUND)
    if version > SCHEMA_VERSION:
        raise _too_new(version)
    if version < SCHEMA_VERSION:
        raise PalyraError(
            f"the PostgreSQL journal's schema is version {version}; open it once writable "
            f"(a daemon start) to migrate it to {SCHEMA_VERSION}",
            code=ErrorCode.UNSUPPORTED_VERSION,
            details={"schema_version": str(version), "known_version": str(SCHEMA_VERSION)},
        )
