"""A commit's deletes are planned for the table as it is, not as it was (PostgreSQL).

psycopg prepares a statement the fifth time it runs, and PostgreSQL then keeps the
generic plan made on the statistics of that moment. For the writer's deletes, prepared
while a young journal's table was small, that plan was a hash semi-join over a
sequential scan of ``journal_kv``, kept while the journal grew: every commit that
deleted a row read the whole table (16 ms of the server's CPU a commit after 100,000
rows, and growing). The writer sends its deletes unprepared, so each is planned for the
table's current size: this asks the writer's own session which statements it holds
prepared after many commits that delete rows.
"""

from __future__ import annotations

from pathlib import Path

from palyra.journal import EntityWrite, JournalConfig, JournalStore
from palyra.journal.postgres.store import PostgresJournalStore
from palyra.testing.postgres import PostgresServer

from .helpers import draft


async def test_the_writer_never_keeps_a_plan_of_its_deletes(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = postgres_server.create_database()
    with JournalStore.open(tmp_path / "d", config=JournalConfig(backend="postgres", dsn=dsn)
                           ) as store:
        for i in range(12):  # more than psycopg's prepare threshold (5)
            await store.append([draft(i, entity_writes=(
                EntityWrite("meta", f"k{i}", b"v"), EntityWrite("meta", f"k{i - 1}", None)))])
        assert store.get_entity("meta", "k11") == b"v" and store.get_entity("meta", "k10") is None
        for i in range(12, 18):  # commits that delete nothing: their statement is prepared
            await store.append([draft(i, entity_writes=(EntityWrite("meta", f"k{i}", b"v"),))])
        assert isinstance(store, PostgresJournalStore) and store._writer is not None
        # The writer's thread is idle (every append above was answered): ask its session.
        conn = store._writer._conn
        prepared = [row[0] for row in conn.execute(
            "SELECT statement FROM pg_prepared_statements").fetchall()]
    assert any("INSERT INTO journal_kv" in text for text in prepared)  # the puts are kept
    assert not [text for text in prepared if "DELETE FROM journal_kv" in text
                and "unnest" in text], prepared
