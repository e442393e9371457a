"""What only the PostgreSQL backend has: several writers on one database, schema versions.

Two ``JournalStore`` objects on one database stand for two daemons: each has its
own writer thread and connection, so nothing but PostgreSQL orders their commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from palyra.core.errors import AlreadyExists, ErrorCode, PalyraError
from palyra.journal import EntityWrite, JournalConfig, JournalStore, verify_store
from palyra.journal import _env as names
from palyra.journal.format.record import scoped_key, scoped_prefix, u64_key
from palyra.journal.postgres.kv import PgTxn
from palyra.journal.postgres.schema import SCHEMA_VERSION, migrate, stored_version
from palyra.journal.postgres.statements import last_in_scope, taken_keys
from palyra.journal.postgres.store import PostgresJournalStore
from palyra.journal.postgres.watch import OwnCommits
from palyra.journal.read.reads import last_scoped_number
from palyra.journal.read.tlog import StoredTree
from palyra.testing.postgres import PostgresServer

from .helpers import draft


def _config(dsn: str, **settings: object) -> JournalConfig:
    return JournalConfig(backend="postgres", dsn=dsn, **settings)  # type: ignore[arg-type]


@contextlib.contextmanager
def _two_daemons(tmp_path: Path, dsn: str) -> Iterator[tuple[JournalStore, JournalStore]]:
    """Two stores on one database, as two daemons' (closed after)."""
    a = JournalStore.open(tmp_path / "a", config=_config(dsn))
    b = JournalStore.open(tmp_path / "b", config=_config(dsn))
    try:
        yield a, b
    finally:
        a.close()
        b.close()


async def test_two_writers_share_one_dense_chain(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = postgres_server.create_database()
    with _two_daemons(tmp_path, dsn) as (a, b):
        async def appender(store: JournalStore, name: str, count: int) -> list[str]:
            ids = []
            for n in range(count):
                # Both daemons write the same sessions and the same run's tape.
                events = await store.append([
                    draft(n, session_id=f"s{n % 3}", run_id="shared", tape=True,
                          payload={"by": name, "n": n}),
                    draft(n, session_id=f"s{n % 3}", run_id=f"own-{name}", tape=True),
                ])
                ids += [e.event_id for e in events]
            return ids

        written = await asyncio.gather(*(
            appender(store, f"{name}{k}", 15)
            for k in range(4) for name, store in (("a", a), ("b", b))
        ))  # fmt: skip
        total = sum(len(ids) for ids in written)
        for store in (a, b):  # either daemon reads the whole journal
            events = store.read_range(0, 1000)
            assert [e.position for e in events] == list(range(1, total + 1))
            assert sorted(e.event_id for e in events) == sorted(i for ids in written for i in ids)
            shared = store.read_tape("shared", -1, 1000).events
            assert [e.tape_seq for e in shared] == list(range(total // 2))
            assert store.head() == a.head()
        assert verify_store(a).ok and verify_store(b).ok


async def test_an_event_id_taken_by_the_other_writer_is_refused(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = postgres_server.create_database()
    with JournalStore.open(tmp_path / "a", config=_config(dsn)) as a, \
            JournalStore.open(tmp_path / "b", config=_config(dsn)) as b:
        taken = (await a.append([draft(1, session_id="s")]))[0].event_id
        with pytest.raises(AlreadyExists):
            await b.append([draft(2, session_id="s", event_id=taken)])
        assert (await b.append([draft(3, session_id="s")]))[0].position == 2


async def test_a_row_written_by_one_daemon_is_found_by_the_other_at_once(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = postgres_server.create_database()
    with JournalStore.open(tmp_path / "a", config=_config(dsn)) as a, \
            JournalStore.open(tmp_path / "b", config=_config(dsn)) as b:
        assert b.get_entity("runs", "r1") is None  # b looked for it before it existed
        for n in range(3):
            await a.append([draft(n, session_id="s", entity_writes=(
                EntityWrite("runs", "r1", f"v{n}".encode()),))])
            # Existence never lags: no daemon files an absent row. A changed value is
            # b's once its watcher marks the row (docs/journal/postgres.md), and at once
            # when read past the cache, as scans always are.
            assert b.get_entity("runs", "r1") is not None
            assert b.get_entity("runs", "r1", fresh=True) == f"v{n}".encode()
            assert b.scan_entities("runs") == [("r1", f"v{n}".encode())]
            async with asyncio.timeout(10):
                while True:
                    if b.get_entity("runs", "r1") == f"v{n}".encode():
                        break
                    await asyncio.sleep(0.01)


async def test_checkpoints_from_either_daemon_sign_the_shared_head(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = postgres_server.create_database()
    with JournalStore.open(tmp_path / "a", config=_config(dsn)) as a, \
            JournalStore.open(tmp_path / "b", config=_config(dsn)) as b:
        await a.append([draft(0, session_id="s")])
        signed_b = await b.checkpoint()  # b never appended: it signs what a wrote
        assert (signed_b.position, signed_b.head_hash) == (1, a.head().head_hash)
        await b.append([draft(1, session_id="s")])
        signed_a = await a.checkpoint()
        assert signed_a.position == 2
        report = verify_store(a)
        assert report.ok and report.checkpoints == 2


def _migrate_at_once(dsn: str, daemons: int) -> list[BaseException]:
    """``daemons`` threads connect, then all migrate at the same moment; their errors."""
    errors: list[BaseException] = []
    together = threading.Barrier(daemons)

    def start() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                together.wait()
                assert migrate(conn) == SCHEMA_VERSION
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(daemons)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def test_concurrent_start_ups_migrate_once(postgres_server: PostgresServer) -> None:
    for _ in range(5):  # each a fresh database, four daemons starting together
        dsn = postgres_server.create_database()
        assert _migrate_at_once(dsn, 4) == []
        with psycopg.connect(dsn) as conn:
            rows = conn.execute("SELECT version FROM palyra_schema ORDER BY version").fetchall()
            assert [r[0] for r in rows] == list(range(1, SCHEMA_VERSION + 1))
            assert stored_version(conn) == SCHEMA_VERSION


def test_a_newer_schema_is_refused_at_start_up(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = postgres_server.create_database()
    JournalStore.open(tmp_path / "a", config=_config(dsn)).close()
    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO palyra_schema (version) VALUES (%s)", (SCHEMA_VERSION + 1,))
    for readonly in (False, True):
        with pytest.raises(PalyraError) as info:
            JournalStore.open(tmp_path / "b", config=_config(dsn, readonly=readonly))
        assert info.value.code is ErrorCode.UNSUPPORTED_VERSION
        assert info.value.details["schema_version"] == str(SCHEMA_VERSION + 1)


def test_read_only_open_of_an_empty_database_is_not_found(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = postgres_server.create_database()
    with pytest.raises(PalyraError) as info:
        JournalStore.open(tmp_path / "a", config=_config(dsn, readonly=True))
    assert info.value.code is ErrorCode.NOT_FOUND
    with psycopg.connect(dsn) as conn:  # nothing was created by looking
        assert stored_version(conn) == 0


async def test_a_data_dir_names_its_database_for_verify_and_refuses_a_second_lmdb_journal(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = postgres_server.create_database()
    data_dir = tmp_path / "data"
    async with JournalStore.open(data_dir, config=_config(dsn)) as store:
        await store.append([draft(i, session_id="s") for i in range(3)])
    report = verify_store(data_dir)  # by path, as `palyra journal verify` does
    assert report.ok and report.events == 3
    assert not (data_dir / "journal" / "data.mdb").exists()
    with pytest.raises(PalyraError) as info:
        JournalStore.open(data_dir)  # a writable LMDB open would split the journal
    assert info.value.code is ErrorCode.CONFIG_INVALID


def test_an_unreachable_database_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(PalyraError) as info:
        JournalStore.open(tmp_path / "a", config=_config(
            "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1"))
    assert info.value.code is ErrorCode.UNAVAILABLE


# --- leases with fencing epochs ---------------------------------------------------------


def _pg(store: JournalStore) -> PostgresJournalStore:
    assert isinstance(store, PostgresJournalStore)
    return store


def _expire(dsn: str, name: str) -> None:
    """Let the lease's TTL pass (the database's clock decides expiry, so move the row)."""
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE journal_lease SET expires_at = now() - interval '1 second' "
                     "WHERE name = %s", (name,))


async def test_a_fenced_out_owner_cannot_write_even_before_it_notices(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = postgres_server.create_database()
    with JournalStore.open(tmp_path / "a", config=_config(dsn)) as a_store, \
            JournalStore.open(tmp_path / "b", config=_config(dsn)) as b_store:
        a, b = _pg(a_store), _pg(b_store)
        lease_a = a.acquire_lease("session:s1", "daemon-a", ttl_s=60)
        assert lease_a is not None and lease_a.epoch == 1 and lease_a.previous_owner == ""
        assert b.acquire_lease("session:s1", "daemon-b", ttl_s=60) is None  # held
        await a.append([draft(0, session_id="s1")], fence=lease_a)
        _expire(dsn, "session:s1")  # a stalls past its TTL without noticing
        lease_b = b.acquire_lease("session:s1", "daemon-b", ttl_s=5)
        assert lease_b is not None and lease_b.epoch == 2
        assert lease_b.previous_owner == "daemon-a"  # its term ended unsettled: b inherits
        head = a.head()
        with pytest.raises(PalyraError) as info:
            await a.append([draft(1, session_id="s1")], fence=lease_a)
        assert info.value.code is ErrorCode.LEASE_STALE
        assert a.head() == head  # nothing of it was written
        assert not a.renew_lease(lease_a, 5)
        await b.append([draft(2, session_id="s1")], fence=lease_b)
        assert [e.payload["i"] for e in b.read_session("s1")] == [0, 2]
        assert b.lease_holder("session:s1") == ("daemon-b", 2, True)


async def test_a_stale_append_fails_alone_in_its_group_commit(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = postgres_server.create_database()
    with JournalStore.open(tmp_path / "a", config=_config(dsn)) as opened:
        store = _pg(opened)
        old = store.acquire_lease("session:s", "d", ttl_s=5)
        assert old is not None
        new = store.acquire_lease("session:s", "d", ttl_s=5)  # a new term of the same owner
        assert new is not None and new.epoch == old.epoch + 1
        results = await asyncio.gather(
            store.append([draft(0, session_id="s")], fence=old),
            store.append([draft(1, session_id="s")], fence=new),
            store.append([draft(2, session_id="t")]),
            return_exceptions=True,
        )
        assert isinstance(results[0], PalyraError)
        assert results[0].code is ErrorCode.LEASE_STALE
        assert [type(r) for r in results[1:]] == [list, list]
        assert sorted(e.payload["i"] for e in store.read_range(0)) == [1, 2]
        assert verify_store(store).ok


async def test_a_released_lease_is_taken_over_at_once(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = postgres_server.create_database()
    with JournalStore.open(tmp_path / "a", config=_config(dsn)) as opened:
        store = _pg(opened)
        lease = store.acquire_lease("session:s", "a", ttl_s=60)
        assert lease is not None and store.renew_lease(lease, 60)
        assert store.acquire_lease("session:s", "b", ttl_s=60) is None
        store.release_lease(lease)
        taken = store.acquire_lease("session:s", "b", ttl_s=60)
        assert taken is not None and taken.epoch == lease.epoch + 1
        assert taken.previous_owner == "a"  # released unsettled: its work is b's now
        store.release_lease(taken, settled=True)
        after = store.acquire_lease("session:s", "a", ttl_s=60)
        assert after is not None and after.previous_owner == ""  # settled: nothing left


# --- followers hear of other daemons' commits ---------------------------------------------


async def _parked(waiting: asyncio.Future[object]) -> None:
    """Let ``waiting`` (a follower's next event) read the store and park on its buffer."""
    for _ in range(20):
        await asyncio.sleep(0.01)
    assert not waiting.done()


async def test_a_tape_followed_on_one_daemon_gets_what_another_commits(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = postgres_server.create_database()
    with JournalStore.open(tmp_path / "a", config=_config(dsn)) as a, \
            JournalStore.open(tmp_path / "b", config=_config(dsn)) as b:
        await a.append([draft(0, session_id="s", run_id="r", tape=True)])
        follower = b.follow_tape("r", after_seq=-1).__aiter__()
        assert (await asyncio.wait_for(follower.__anext__(), 5)).tape_seq == 0  # replayed
        for n in range(1, 6):  # each written on a, interleaved with b's own writes
            waiting = asyncio.ensure_future(follower.__anext__())
            await _parked(waiting)  # the follower caught up and waits for a live event
            await a.append([draft(n, session_id="s", run_id="r", tape=True)])
            await b.append([draft(100 + n, session_id="t", run_id="other", tape=True)])
            got = await asyncio.wait_for(waiting, 5)
            assert (got.tape_seq, got.payload["i"]) == (n, n)
        everything = b.follow(after_position=0).__aiter__()
        seen = [(await asyncio.wait_for(everything.__anext__(), 5)).position for _ in range(11)]
        assert seen == list(range(1, 12))
        waiting = asyncio.ensure_future(everything.__anext__())
        await _parked(waiting)
        await a.append([draft(9, session_id="s")])
        assert (await asyncio.wait_for(waiting, 5)).position == 12
        await follower.aclose()
        await everything.aclose()


@given(
    own=st.lists(st.tuples(st.integers(1, 40), st.integers(0, 5)), max_size=8),
    after=st.integers(0, 30), through=st.integers(0, 45),
)
def test_foreign_ranges_are_exactly_the_positions_this_daemon_did_not_write(
    own: list[tuple[int, int]], after: int, through: int
) -> None:
    ranges = OwnCommits()
    written: set[int] = set()
    for first, extra in own:
        if not written.intersection(range(first, first + extra + 1)):  # commits never overlap
            ranges.add(first, first + extra)
            written.update(range(first, first + extra + 1))
    gaps, final = ranges.foreign(after, through)
    assert final == max(after, through)  # nothing pending
    listed = [p for first, last in gaps for p in range(first, last + 1)]
    assert listed == [p for p in range(after + 1, through + 1) if p not in written]
    assert all(a[1] + 1 < b[0] for a, b in itertools.pairwise(gaps))  # maximal ranges


def test_the_watcher_stops_short_of_a_commit_still_pending() -> None:
    ranges = OwnCommits()
    ranges.add(1, 2)
    ranges.begin(5, 6)
    assert ranges.foreign(0, 8) == ([(3, 4)], 4)  # 5.. may be this daemon's: not yet decided
    ranges.confirm()
    assert ranges.foreign(4, 8) == ([(7, 8)], 8)
    ranges.begin(9, 9)
    ranges.discard()  # the commit failed: 9 is whoever's commits it
    assert ranges.foreign(8, 9) == ([(9, 9)], 9)


async def test_a_lost_database_fails_reads_and_appends_as_unavailable(tmp_path: Path) -> None:
    with PostgresServer() as own:  # a server of its own: this test stops it
        dsn = own.create_database()
        store = JournalStore.open(tmp_path / "a", config=_config(dsn, pool_size=1))
        try:
            await store.append([draft(0, session_id="s")])
            own.stop()
            with pytest.raises(PalyraError) as info:
                store.read_range(0)
            assert info.value.code is ErrorCode.UNAVAILABLE
            with pytest.raises(PalyraError) as info:
                await store.append([draft(1, session_id="s")])
            assert info.value.code is ErrorCode.UNAVAILABLE
        finally:
            store.close()


async def test_a_commit_tap_gets_what_another_daemon_commits(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = postgres_server.create_database()
    with JournalStore.open(tmp_path / "a", config=_config(dsn)) as a, \
            JournalStore.open(tmp_path / "b", config=_config(dsn)) as b:
        seen: list[int] = []
        b.tap_commits(lambda pairs: seen.extend(event.position for event, _size in pairs))
        await b.append([draft(0, session_id="s")])
        await a.append([draft(1, session_id="s"), draft(2, session_id="s")])
        await b.append([draft(3, session_id="t")])
        for _ in range(500):  # a's commit reaches b from its watch thread
            if len(seen) == 4:
                break
            await asyncio.sleep(0.01)
        assert sorted(seen) == [1, 2, 3, 4]


def test_the_event_id_look_up_descends_the_index_on_a_young_journal(
    postgres_server: PostgresServer,
) -> None:
    """The writer's clash check, run as often as commits run it, on a table never analyzed:
    each run must look its keys up in the primary key, not filter the whole sub-DB
    (a prepared generic plan did, so the server's CPU per commit grew with the journal)."""
    plans: list[str] = []
    with psycopg.connect(postgres_server.create_database(), autocommit=True) as conn:
        migrate(conn)
        conn.execute("INSERT INTO journal_kv SELECT '_event_ids', int8send(i), '' "
                     "FROM generate_series(1, 3000) i")  # fmt: skip
        # auto_explain hands each plan back as a notice: the writer's call, not a copy of it.
        conn.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
        for statement in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                          "SET auto_explain.log_analyze = on", "SET client_min_messages = log"):
            conn.execute(statement)
        for n in range(12):  # past psycopg's prepare threshold (5) and the planner's (5)
            keys = [(10_000 + n * 8 + k).to_bytes(8, "big") for k in range(8)] + [
                (3000 - n).to_bytes(8, "big")]
            assert taken_keys(conn, "_event_ids", keys) == {(3000 - n).to_bytes(8, "big")}
    looked_up = [plan for plan in plans if "unnest" in plan or "ANY" in plan]
    assert len(looked_up) == 12
    for plan in looked_up:
        assert "Rows Removed by Filter" not in plan, plan
        assert "Index Cond: ((db = " in plan and "AND (key = t.key))" in plan, plan


def test_the_writers_one_statement_head_look_up_agrees_with_the_readers(
    postgres_server: PostgresServer,
) -> None:
    """``last_in_scope`` (one round trip) against ``last_scoped_number`` and
    ``record_hash_at`` (three) on the same rows, neighbouring scopes included."""
    rows = [("_by_session", scoped_key(scope, n), b"") for scope, n in (
        ("s", 3), ("s", 7), ("s0", 9), ("r", 1), ("r", (1 << 64) - 1), ("t", 5))]  # fmt: skip
    rows += [("_by_session", scoped_prefix("u") + b"\x00" * 9, b"")]  # a key too long for "u"
    rows += [("_events", u64_key(n), f"record {n}".encode()) for n in (7, 9)]
    with psycopg.connect(postgres_server.create_database(), autocommit=True) as conn:
        migrate(conn)
        conn.cursor().executemany("INSERT INTO journal_kv VALUES (%s, %b, %b)", rows)
        txn = PgTxn(conn)
        for scope in ("s", "s0", "r", "t", "u", "q", "z"):
            expected = last_scoped_number(txn, "_by_session", scope)
            assert last_in_scope(conn, "_by_session", scope)[0] == expected, scope
            number, raw = last_in_scope(conn, "_by_session", scope, "_events")
            assert number == expected, scope
            stored = txn.get(u64_key(expected), "_events") if expected >= 0 else None
            assert raw == stored, scope


async def test_a_writer_folds_the_leaves_other_daemons_stored_into_its_tree(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    # After another daemon's commits a writer does not read the transparency log's
    # frontier whole: it folds the leaves stored since its own last commit into the
    # frontier it committed. The tree it then extends must be the stored one.
    dsn = postgres_server.create_database()
    with _two_daemons(tmp_path, dsn) as (a, b):
        n = itertools.count()
        for round_ in range(3):
            await a.append([draft(next(n), session_id="a")])
            # Records of several sessions in one commit, then another: leaves in an
            # order a wrong fold would get wrong (a reversed run, a dropped leaf).
            for _ in range(2):
                await b.append([draft(next(n), session_id=f"b{k}-{round_}") for k in range(3)])
            await a.append([draft(next(n), session_id="a")])
            writer = _pg(a)._writer
            assert writer is not None
            with _pg(a).env.read() as txn:
                stored = StoredTree(txn, _pg(a).env.dbs[names.TLOG]).frontier()
            assert writer._tree == stored
        assert verify_store(a).ok
