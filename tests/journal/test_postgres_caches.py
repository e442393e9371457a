"""Every cache a daemon keeps follows the other daemons' writes (PostgreSQL).

Two ``JournalStore`` objects on one real PostgreSQL database stand for two
daemons: each has its own writer, watcher and entity cache. A row or table one
of them caches is written by the other; the cached read must come to show the
write, carried by the watcher that finds the other daemon's commits (not by a
timer: without the marking, the old value is served for ever).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from palyra.agents.model import AgentRecord, BindingRecord
from palyra.agents.registry import AgentRegistry
from palyra.channels import ChannelRouter, ChannelsConfig, PairingBook
from palyra.channels.recent import Recent
from palyra.journal import EntityWrite, JournalConfig, JournalStore
from palyra.journal.postgres import changes
from palyra.journal.postgres.store import PostgresJournalStore
from palyra.memory.embed import HashEmbedder
from palyra.memory.service import Memory
from palyra.policy import PolicyGate
from palyra.tasks import TaskQueue
from palyra.testing.postgres import PostgresServer

from .helpers import draft

_SEEN_WITHIN_S = 10.0  # the watcher's poll is 0.25 s: generous for a loaded machine


@pytest.fixture
def two_daemons(tmp_path: Path, postgres_server: PostgresServer
                ) -> Iterator[tuple[JournalStore, JournalStore]]:
    dsn = postgres_server.create_database()
    config = JournalConfig(backend="postgres", dsn=dsn)
    a = JournalStore.open(tmp_path / "a", config=config)
    b = JournalStore.open(tmp_path / "b", config=config)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


async def _eventually(look: Callable[[], object], expected: object) -> None:
    """Wait until ``look()`` equals ``expected`` (the other daemon's watcher runs apart)."""
    deadline = time.monotonic() + _SEEN_WITHIN_S
    seen = look()
    while seen != expected and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        seen = look()
    assert seen == expected


async def _write(store: JournalStore, table: str, key: str, value: bytes | None) -> None:
    await store.append([draft(0, session_id="s", entity_writes=(EntityWrite(table, key, value),))])


async def test_a_cached_row_shows_the_other_daemons_write(
    two_daemons: tuple[JournalStore, JournalStore]
) -> None:
    a, b = two_daemons
    await _write(a, "sessions", "id:s1", b"posture=ask_each_time")
    await _eventually(lambda: b.get_entity("sessions", "id:s1"), b"posture=ask_each_time")
    first = b.get_entity("sessions", "id:s1")
    assert b.get_entity("sessions", "id:s1") is first  # served from b's cache, not re-read
    await _write(a, "sessions", "id:s1", b"posture=always_allow")
    await _eventually(lambda: b.get_entity("sessions", "id:s1"), b"posture=always_allow")
    await _write(a, "sessions", "id:s1", None)  # a delete is seen too
    await _eventually(lambda: b.get_entity("sessions", "id:s1"), None)
    # b's own write, then a's: the later one in the database is what b serves.
    await _write(b, "sessions", "id:s1", b"by b")
    assert b.get_entity("sessions", "id:s1") == b"by b"
    await _write(a, "sessions", "id:s1", b"by a")
    await _eventually(lambda: b.get_entity("sessions", "id:s1"), b"by a")


async def test_a_later_commit_of_the_other_daemon_wins_over_ones_own_slow_marking(
    two_daemons: tuple[JournalStore, JournalStore]
) -> None:
    a, b = two_daemons
    assert isinstance(b, PostgresJournalStore)
    await _write(a, "sessions", "id:s1", b"v0")
    await _eventually(lambda: b.get_entity("sessions", "id:s1"), b"v0")  # cached on b
    # b's writer is slow to mark its own commit (the thread is descheduled right after
    # COMMIT): a commits the same row after it, and b's watcher finds a's commit meanwhile.
    writer: Any = b._writer
    mark, released = writer._on_rows, threading.Event()

    def slow_mark(rows: Any, values: Any) -> None:
        released.wait(10)
        mark(rows, values)

    writer._on_rows = slow_mark
    before = a.head().count
    own = asyncio.create_task(_write(b, "sessions", "id:s1", b"by b"))
    await _eventually(lambda: a.head().count, before + 1)  # b's commit is in
    await _write(a, "sessions", "id:s1", b"by a, later")
    await asyncio.sleep(1.0)  # four of b's watcher's polls
    released.set()
    await own
    # The database holds a's value: b must not keep serving its own older one.
    await _eventually(lambda: b.get_entity("sessions", "id:s1"), b"by a, later")


async def test_bindings_and_agents_follow_the_other_daemon(
    two_daemons: tuple[JournalStore, JournalStore]
) -> None:
    a, b = two_daemons
    on_a, on_b = AgentRegistry(a), AgentRegistry(b)
    agent = await on_a.create(AgentRecord(agent_id="", display_name="helper",
                                          tool_postures={"fs.write": "ask_each_time"}), "user:alice")
    await _eventually(lambda: on_b.get(agent.agent_id) is not None, True)
    assert on_b.bindings() == []  # b now holds the (empty) bindings, keyed by a version
    bound = await on_a.bind(agent.agent_id, BindingRecord(binding_id="", agent_id="",
                                                          channel="slack"), "user:alice")
    await _eventually(lambda: [x.binding_id for x in on_b.bindings()], [bound.binding_id])
    await on_a.update(agent.agent_id, AgentRecord(agent_id="", display_name="helper",
                                                  tool_postures={"fs.write": "always_allow"}),
                      "user:alice")
    await _eventually(lambda: on_b.require(agent.agent_id).tool_postures,
                      {"fs.write": "always_allow"})
    await on_a.unbind(agent.agent_id, bound.binding_id, "user:alice")
    await _eventually(lambda: on_b.bindings(), [])


async def test_each_daemons_memory_index_follows_the_others_writes(
    two_daemons: tuple[JournalStore, JournalStore]
) -> None:
    a, b = two_daemons
    on_a, on_b = Memory(a, HashEmbedder()), Memory(b, HashEmbedder())
    everyone: Callable[[object], bool] = lambda _item: True  # noqa: E731
    assert on_b.search("Brno", everyone) == []  # b's index is built (empty) and cached
    item = await on_a.ingest("user:alice", "the office is in Brno")
    await _eventually(lambda: [i.memory_id for i, _hit in on_b.search("Brno", everyone)],
                      [item.memory_id])
    await on_a.delete(item.memory_id, "user:alice")
    await _eventually(lambda: on_b.search("Brno", everyone), [])


def _context_note(store: JournalStore) -> Recent:
    """The note of which conversations hold context rows, of a channel router wired on
    ``store`` as a daemon wires it (admission and this note never touch the engine)."""
    router = ChannelRouter(store, None, TaskQueue(store), PairingBook(store),  # type: ignore[arg-type]
                           PolicyGate.load(), ChannelsConfig())
    return router._admitter.recent


async def _seen_by(watching: JournalStore, writing: JournalStore) -> None:
    """Wait until ``watching``'s watcher has marked every commit ``writing`` made."""
    assert isinstance(watching, PostgresJournalStore) and watching._watch is not None
    last = writing.read_range(0, 1000)[-1].position
    watch = watching._watch
    await _eventually(lambda: watch._seen >= last, True)


async def test_the_other_daemons_unrelated_channel_writes_keep_the_context_note(
    two_daemons: tuple[JournalStore, JournalStore]
) -> None:
    a, b = two_daemons
    note = _context_note(b)
    assert note.context_mark("slack:acme:C1") is None  # certainly none: no run looks
    # a admits messages elsewhere: a dedupe key, a message, a context row of another
    # conversation kept and then consumed. None of them is a context row of C1.
    await _write(a, "channels", "dedupe:" + "ab" * 32, b"dedupe")
    await _write(a, "channels", "msg:0001", b"admitted by a")
    await _write(a, "channels", "ctx:slack:acme:C2\x1f0001", b"kept for context by a")
    await _write(a, "channels", "ctx:slack:acme:C2\x1f0001", None)
    await _seen_by(b, a)
    assert b.foreign_writes("channels") > 0  # b's watcher marked a's channel writes
    # ... and b's next run in C1 still reads no context rows (before: every run looked
    # once any other daemon had written the channels table).
    assert note.context_mark("slack:acme:C1") is None
    assert note.context_mark("slack:acme:C2") is not None  # C2's run looks


async def test_context_rows_the_other_daemon_keeps_are_looked_for(
    two_daemons: tuple[JournalStore, JournalStore]
) -> None:
    a, b = two_daemons
    note = _context_note(b)
    await _write(b, "channels", "ctx:slack:acme:C2\x1f0001", b"b's own row")
    assert note.context_mark("slack:acme:C1") is None  # certainly none: nobody else wrote
    await _write(a, "channels", "ctx:slack:acme:C1\x1f0002", b"kept for context by a")
    await _seen_by(b, a)
    mark = note.context_mark("slack:acme:C1")
    assert mark is not None  # now b's run in C1 looks
    # b's run read and consumed the rows it found: the note forgets C1 again, until a
    # keeps another one there.
    note.context_consumed("slack:acme:C1", mark)
    assert note.context_mark("slack:acme:C1") is None
    await _write(a, "channels", "ctx:slack:acme:C1\x1f0003", b"kept again by a")
    await _eventually(lambda: note.context_mark("slack:acme:C1") is not None, True)


async def test_a_daemon_too_far_behind_forgets_its_whole_cache(
    two_daemons: tuple[JournalStore, JournalStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = two_daemons
    assert isinstance(b, PostgresJournalStore)
    note = _context_note(b)
    await _write(a, "sessions", "id:s1", b"old")
    watch = b._watch
    assert watch is not None
    await _eventually(lambda: watch._seen, 1)  # b has marked a's commit
    assert b.get_entity("sessions", "id:s1") == b"old"  # and caches what it reads now
    monkeypatch.setattr(changes, "KEEP_POSITIONS", 2)
    monkeypatch.setattr(changes, "TRIM_EVERY", 1)
    watch.stop()  # b falls behind while a writes
    await _write(a, "sessions", "id:s1", b"new")
    for n in range(5):
        await _write(a, "meta", f"other{n}", b"x")
    assert b.get_entity("sessions", "id:s1") == b"old"  # nobody has told b yet
    watch._conn = watch._listen()  # stopping closed it
    try:
        watch.catch_up()  # what its thread would do next
    finally:
        watch._conn.close()
    assert b.get_entity("sessions", "id:s1") == b"new"
    # Nor can b tell which conversations a kept context rows in: every run looks.
    assert note.context_mark("slack:acme:C1") == -1


async def test_a_task_queue_too_far_behind_reads_every_task_again(
    two_daemons: tuple[JournalStore, JournalStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task another daemon enqueued while this one's watcher could not tell which rows
    were written is still claimed here (the queue reads every task again), not left for
    a restart."""
    a, b = two_daemons
    assert isinstance(b, PostgresJournalStore)
    qa, qb = TaskQueue(a), TaskQueue(b)
    await qa.start()
    await qb.start()
    try:
        watch = b._watch
        assert watch is not None
        monkeypatch.setattr(changes, "KEEP_POSITIONS", 2)
        monkeypatch.setattr(changes, "TRIM_EVERY", 1)
        watch.stop()  # b falls behind while a enqueues
        task, _ = await qa.enqueue("only-b-runs-this")
        for n in range(5):
            await _write(a, "meta", f"other{n}", b"x")
        watch._conn = watch._listen()  # stopping closed it
        try:
            watch.catch_up()  # what its thread would do next: rows unknown
        finally:
            watch._conn.close()
        claimed = await asyncio.wait_for(qb.claim("b", frozenset({"only-b-runs-this"})), 5)
        assert claimed.task_id == task.task_id
    finally:
        await qa.close()
        await qb.close()


async def test_the_names_of_written_rows_stay_bounded(
    two_daemons: tuple[JournalStore, JournalStore], postgres_server: PostgresServer,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    a, _b = two_daemons
    monkeypatch.setattr(changes, "KEEP_POSITIONS", 8)
    monkeypatch.setattr(changes, "TRIM_EVERY", 4)
    for n in range(40):
        await _write(a, "meta", f"row{n}", b"x")
    dsn = a._config.dsn
    with psycopg.connect(dsn) as conn:
        keys = [int.from_bytes(bytes(k), "big") for (k,) in conn.execute(
            "SELECT key FROM journal_kv WHERE db = %s ORDER BY key", (changes.CHANGES,))]
        head = conn.execute("SELECT next_position - 1 FROM journal_head").fetchone()
        assert head is not None and head[0] == 40
        # One name row per commit, none older than KEEP_POSITIONS behind the last trim.
        assert keys == list(range(keys[0], 41)) and 40 - 8 - 4 <= keys[0] <= 40 - 8
        assert changes.rows_written(conn, 40, [(40 - 8, 40)]) == [
            ("meta", f"row{n}") for n in range(40 - 8 - 1, 40)]
        # Reaching back past what is surely kept: unknown, never a partial answer.
        assert changes.rows_written(conn, 40, [(40 - 9, 40)]) is None


async def test_catching_up_after_a_new_lease_never_serves_an_older_row(
    two_daemons: tuple[JournalStore, JournalStore]
) -> None:
    # A daemon that has just taken a session over reads its rows as their last word
    # (engine/sessions/ownership.py). Its watcher may not have marked the old owner's
    # last commit yet: here it is held inside the marking, as a slow thread would be.
    a, b = two_daemons
    assert isinstance(b, PostgresJournalStore)
    await _write(a, "runs", "r1", b"step 1")
    await _eventually(lambda: b.get_entity("runs", "r1"), b"step 1")
    # Until b serves the row from its cache (the same object twice): the watcher's mark
    # of a's first commit may land after b's first read, which is then not kept.
    await _eventually(lambda: b.get_entity("runs", "r1") is b.get_entity("runs", "r1"), True)
    cache = b._entities
    assert cache is not None
    cache._marking.acquire()  # b's watcher blocks as soon as it marks a's next commit
    release = threading.Timer(0.3, cache._marking.release)
    try:
        await _write(a, "runs", "r1", b"step 2")
        assert b.get_entity("runs", "r1") == b"step 1"  # the stale window, shown
    except BaseException:
        cache._marking.release()
        raise
    release.start()  # the watcher goes on while the catch-up waits for it
    try:
        await asyncio.to_thread(b.catch_up_with_others)
        assert b.get_entity("runs", "r1") == b"step 2"
    finally:
        release.join()
