"""The journal on PostgreSQL: the same records, chains and indexes as LMDB, in SQL rows.

Chosen by ``[journal] backend = "postgres"`` (see ``docs/journal/postgres.md``).
The commit planner (``write.plan``) is shared with LMDB; this package only
makes its plans durable in one PostgreSQL transaction and reads them back
through the same read paths (``read.reads``, verify, export).
"""
