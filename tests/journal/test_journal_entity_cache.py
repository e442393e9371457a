"""Entity reads through the cache never serve a row older than the last answered commit.

A model of every table is kept beside a real store; writes (puts and deletes,
several tables, several keys) interleave with reads, while a second thread
reads the same rows all the time so its cache fills race the writer's
commits. After every append returns, every row read equals the model.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palyra.journal import EntityWrite, JournalConfig, JournalStore

from .helpers import draft

_TABLES = ("sessions", "runs")
_KEYS = ("a", "b", "c")
_writes = st.lists(
    st.lists(st.tuples(st.sampled_from(_TABLES), st.sampled_from(_KEYS),
                       st.one_of(st.none(), st.binary(min_size=1, max_size=8))),
             min_size=1, max_size=3),
    min_size=1, max_size=20)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(commits=_writes)
def test_reads_after_each_commit_see_it(tmp_path_factory: pytest.TempPathFactory,
                                        commits: list[list[tuple[str, str, bytes | None]]]
                                        ) -> None:
    asyncio.run(_scenario(tmp_path_factory.mktemp("cache"), commits))


async def _scenario(tmp: Path, commits: list[list[tuple[str, str, bytes | None]]]) -> None:
    model: dict[tuple[str, str], bytes | None] = {}
    async with JournalStore.open(tmp / "data", config=JournalConfig(sync=False)) as store:
        stop = threading.Event()

        def hammer() -> None:  # fills the cache concurrently with the writer's commits
            while not stop.is_set():
                for table in _TABLES:
                    for key in _KEYS:
                        store.get_entity(table, key)

        reader = threading.Thread(target=hammer, daemon=True)
        reader.start()
        try:
            for i, writes in enumerate(commits):
                await store.append([draft(i).with_writes(
                    *(EntityWrite(t, k, v) for t, k, v in writes))])
                model.update({(t, k): v for t, k, v in writes})
                for table in _TABLES:
                    for key in _KEYS:
                        assert store.get_entity(table, key) == model.get((table, key)), (
                            i, table, key)
        finally:
            stop.set()
            reader.join()


# The cache alone, with a tiny bound so both "forget" paths run: a model of the
# rows beside it, reads that race a write (the value read predates a commit that
# lands before it is filed), and every hit checked against the model.
_ops = st.lists(st.tuples(st.sampled_from(("read", "stale_read", "write", "write_through",
                                           "apply")),
                          st.sampled_from(_KEYS), st.integers(0, 99)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(ops=_ops, limit=st.integers(1, 4))
def test_cache_never_serves_a_row_written_after_its_read(
        ops: list[tuple[str, str, int]], limit: int) -> None:
    from palyra.journal.read.entity_cache import EntityCache

    cache = EntityCache(limit)
    model: dict[str, bytes | None] = {}
    lmdb: dict[str, bytes | None] = {}  # what LMDB holds: the model as of the last apply
    for op, key, value in ops:
        hit, cached = cache.get("t", key)
        if hit:
            assert cached == model.get(key), (op, key)
        for any_key in _KEYS:  # a row read without waiting must be in LMDB as written
            if cache.settled("t", any_key):
                assert lmdb.get(any_key) == model.get(any_key), (op, any_key)
        if op == "apply":  # the writer's LMDB commit of every answered frame
            lmdb = dict(model)
            cache.applied()
        if op == "write":
            model[key] = bytes([value])
            cache.wrote({("t", key)})
        elif op == "write_through":  # the writer files what it wrote
            model[key] = bytes([value])
            cache.wrote({("t", key)}, {("t", key): model[key]})
        elif op == "read" and not hit:
            clock = cache.clock()
            cache.put("t", key, clock, model.get(key))
        elif op == "stale_read":
            clock = cache.clock()
            old = model.get(key)  # the read sees the row as it was ...
            model[key] = bytes([value])
            cache.wrote({("t", key)})  # ... a commit writes it before the row is filed
            cache.put("t", key, clock, old)


async def test_a_hot_row_rewritten_is_read_without_waiting_for_lmdb(tmp_path: Path) -> None:
    """A cached row a commit rewrites holds the commit's value when the append returns: a
    read of it needs no LMDB read (which would wait for the writer to apply the frame).
    A row nobody read is not added."""
    async with JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False)) as store:
        cache = store._entities
        assert cache is not None
        await store.append([draft(0).with_writes(EntityWrite("runs", "r1", b"new"))])
        assert store.get_entity("runs", "r1") == b"new"  # read once: now cached
        for i, value in enumerate((b"asked", b"decided", None), start=1):
            await store.append([draft(i).with_writes(EntityWrite("runs", "r1", value),
                                                     EntityWrite("tasks", "t1", b"x"))])
            assert cache.get("runs", "r1") == (True, value)
            assert cache.get("tasks", "t1") == (False, None)  # never read: not filed
            assert store.get_entity("runs", "r1") == value


async def test_a_new_session_or_run_row_is_read_from_memory_right_after_its_commit(
        tmp_path: Path) -> None:
    """A session's or a run's row, written and never read yet, is served from the cache
    once its commit is answered: the run's first turn and whoever waits on the run read
    it at once, and that read must not wait on the loop's thread for LMDB to apply the
    commit. A rewrite refreshes it."""
    async with JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False)) as store:
        cache = store._entities
        assert cache is not None
        for table in ("sessions", "runs"):
            for i, value in enumerate((b"created", b"changed", None)):
                await store.append([draft(i).with_writes(EntityWrite(table, "id:1", value))])
                assert cache.get(table, "id:1") == (True, value)
                assert store.get_entity(table, "id:1") == value


async def test_a_row_no_unapplied_commit_wrote_is_read_without_waiting(tmp_path: Path) -> None:
    """While LMDB has not applied an answered commit, a read of a row that commit did not
    write (a new session's key looked up, a row read once per run) does not wait for it."""
    async with JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False)) as store:
        env = store.env
        await store.append([draft(0).with_writes(EntityWrite("runs", "old", b"v0"))])
        store.get_entity("runs", "old")  # waits (if need be) until LMDB holds commit 0
        waits: list[str] = []
        ask = env.on_wait

        def counted() -> None:
            waits.append("wait")
            if ask is not None:
                ask()

        env.on_wait = counted
        await store.append([draft(1).with_writes(EntityWrite("runs", "new", b"v1"))])
        env.visible.clear()  # as the writer does when it answers a frame LMDB lacks yet
        assert store.get_entity("sessions", "never-written") is None
        assert waits == []
        env.visible.clear()  # a row commit 1 wrote waits unless LMDB holds commit 1
        assert store.get_entity("runs", "new") == b"v1"


# Keys of a tracked range that no row holds are answered without an LMDB read
# (core/key_filter.py): never for a key a commit wrote or the range held at open.

_range_keys = st.lists(st.text(min_size=0, max_size=12), max_size=40)


@settings(max_examples=200, deadline=None)
@given(held=_range_keys, written=_range_keys, asked=_range_keys)
def test_a_tracked_key_is_absent_only_if_never_held_or_written(
        held: list[str], written: list[str], asked: list[str]) -> None:
    from palyra.journal.read.entity_cache import EntityCache

    cache = EntityCache(2)  # rows cached or not, the filter answers alone
    cache.track_keys("sessions", "key:", ["key:" + k for k in held])
    cache.wrote({("sessions", "key:" + k) for k in written} | {("runs", "key:x")})
    for key in {*held, *written}:
        assert not cache.absent("sessions", "key:" + key)
    assert not cache.absent("runs", "key:nothing")  # an untracked table
    assert not cache.absent("sessions", "id:nothing")  # outside the tracked range
    assert not EntityCache(shared=True).absent("sessions", "key:nothing")
    if not ({*held, *written} & set(asked)):
        # A false "maybe" is allowed (about one in 2,000), not expected.
        absent = sum(cache.absent("sessions", "key:" + k) for k in set(asked))
        assert absent >= len(set(asked)) - 1, absent


async def test_a_new_session_key_is_answered_without_reading_lmdb(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Held at open or written since, a key is read and found; a new one is not read."""
    from palyra.engine.model.records import SESSIONS, session_index_key
    from palyra.journal.read import entity_cache, reads

    assert session_index_key("x").startswith(entity_cache.TRACKED_KEYS[SESSIONS])
    data = tmp_path / "data"
    config = JournalConfig(sync=False)
    async with JournalStore.open(data, config=config) as store:
        await store.append([draft(0).with_writes(
            EntityWrite(SESSIONS, session_index_key("old"), b"s1"))])
    reads_of: list[str] = []
    real = reads.get_entity

    def counted(env: object, table: str, key: str, *, wait: bool = True) -> bytes | None:
        reads_of.append(key)
        return real(env, table, key, wait=wait)  # type: ignore[arg-type]

    monkeypatch.setattr(reads, "get_entity", counted)
    async with JournalStore.open(data, config=config) as store:  # the filter built at open
        assert store.get_entity(SESSIONS, session_index_key("new")) is None
        assert reads_of == []
        assert store.get_entity(SESSIONS, session_index_key("old")) == b"s1"
        assert reads_of == [session_index_key("old")]
        await store.append([draft(1).with_writes(
            EntityWrite(SESSIONS, session_index_key("new"), b"s2"))])
        cache = store._entities
        assert cache is not None
        cache._rows.clear()  # as if pushed out: the filter must not say absent
        assert store.get_entity(SESSIONS, session_index_key("new")) == b"s2"
        assert store.get_entity(SESSIONS, session_index_key("other")) is None
        assert reads_of == [session_index_key("old"), session_index_key("new")]
