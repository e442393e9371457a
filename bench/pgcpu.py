"""CPU used by a PostgreSQL server's processes (the postmaster and its children)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def cluster_cpu_s(postmaster: int | None) -> float:
    """CPU seconds (user + system) used so far by ``postmaster`` and its direct children."""
    if postmaster is None:
        return 0.0
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # gone meanwhile
        pid, ppid = int(stat.parent.name), int(fields[1])
        if postmaster in (pid, ppid):
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def committed_transactions(dsn: str) -> int:
    """Committed transactions of ``dsn``'s database so far (``pg_stat_database``)."""
    import psycopg  # only a PostgreSQL run loads it: an LMDB run's heap stays as it was

    time.sleep(1.0)  # the statistics are flushed about once a second
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT xact_commit FROM pg_stat_database "
                           "WHERE datname = current_database()").fetchone()
    return int(row[0]) if row else 0
