"""The writer's one-pass array parameters against psycopg's own dumper, on the real server
(PostgreSQL text holds no NUL character, so no generated text has one)."""

from __future__ import annotations

import psycopg
from hypothesis import given, settings
from hypothesis import strategies as st

from palyra.journal.postgres import arrays
from palyra.journal.postgres.arrays import ByteaArray, TextArray
from palyra.testing.postgres import PostgresServer


def test_arrays_reach_the_server_as_psycopg_sends_them(postgres_server: PostgresServer) -> None:
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        arrays.register(conn)

        @settings(max_examples=60, deadline=None)
        @given(st.lists(st.binary(max_size=40), max_size=12),
               st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\x00"),
                               max_size=12), max_size=12))
        def same(raw: list[bytes], texts: list[str]) -> None:
            row = conn.execute(
                "SELECT %b::bytea[], %b::text[], %b::bytea[] IS NOT DISTINCT FROM %b::bytea[], "
                "%b::text[] IS NOT DISTINCT FROM %b::text[], "
                "(SELECT count(*) FROM unnest(%b::bytea[]))",
                (ByteaArray(raw), TextArray(texts), ByteaArray(raw), raw, TextArray(texts),
                 texts, ByteaArray(raw)),
                binary=True,
            ).fetchone()
            assert row is not None
            assert [bytes(b) for b in row[0]] == raw
            assert row[1] == texts
            assert row[2] is True and row[3] is True
            assert row[4] == len(raw)

        same()
