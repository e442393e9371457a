"""JournalStore: appends, validation, indexes, entities, files, locking, growth."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from palyra.core.errors import (
    AlreadyExists,
    ErrorCode,
    InvalidArgument,
    NotFound,
    PalyraError,
    PalyraInternalError,
)
from palyra.core.ids import new_ulid
from palyra.journal import (
    EntityWrite,
    EventDraft,
    JournalConfig,
    JournalStore,
    verify_store,
)

from .helpers import draft


async def test_append_returns_stored_events_with_chains(store: JournalStore) -> None:
    first = await store.append([draft(1, session_id="s1"), draft(2, session_id="s2")])
    second = await store.append([draft(3, session_id="s1")])
    assert [e.position for e in first + second] == [1, 2, 3]
    assert first[0].prev_hash == "0" * 64 and first[1].prev_hash == "0" * 64
    assert second[0].prev_hash == first[0].hash  # session chain skips s2's event
    assert store.head().count == 3
    assert store.head().head_hash == second[0].global_hash
    assert first[0].tape_seq == -1
    assert len(first[0].event_id) == 26


async def test_read_after_write(store: JournalStore) -> None:
    written = await store.append(
        [
            EventDraft(
                "tape.status",
                "engine",
                session_id="s",
                run_id="r",
                tape=True,
                payload={"k": [1, 2.5, None, True, "x"], "secret": "hunter2"},
                principal="admin:a",
                device_id="d",
                channel="c",
                ts_ms=42,
            )
        ]
    )
    [event] = store.read_range(0, 10)
    assert event == written[0]
    assert event.payload == {"k": [1, 2.5, None, True, "x"], "secret": "<redacted>"}
    assert event.redactions == ["$.secret"]
    assert (event.ts_ms, event.principal, event.device_id, event.channel) == (
        42,
        "admin:a",
        "d",
        "c",
    )


async def test_event_id_must_be_ulid_and_unique(store: JournalStore) -> None:
    with pytest.raises(InvalidArgument):
        await store.append([draft(event_id="not-a-ulid")])
    with pytest.raises(InvalidArgument):
        await store.append([draft(event_id=new_ulid().lower())])
    eid = new_ulid()
    await store.append([draft(event_id=eid)])
    with pytest.raises(AlreadyExists):
        await store.append([draft(event_id=eid)])
    other = new_ulid()
    with pytest.raises(AlreadyExists):
        await store.append([draft(event_id=other), draft(event_id=other)])
    # A failed call leaves nothing behind.
    assert store.head().count == 1


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": ""},
        {"payload": {"n": 2**64}},
        {"payload": {"n": float("nan")}},
        {"payload": {1: "x"}},
        {"payload": ["not", "a", "mapping"]},
        {"tape": True, "run_id": ""},
        {"ts_ms": -1},
        {"session_id": "s" * 300},
        {"entity_writes": [EntityWrite("nope", "k", b"v")]},
        {"entity_writes": [EntityWrite("runs", "", b"v")]},
    ],
)
async def test_invalid_drafts_are_rejected(store: JournalStore, bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        await store.append([draft(**bad)])
    assert store.head().count == 0


async def test_payload_cap(data_dir: Path) -> None:
    config = JournalConfig(max_payload_bytes=1024, max_entity_bytes=100)
    async with JournalStore.open(data_dir, config=config) as store:
        await store.append([draft(payload={"x": "a" * 1000})])
        with pytest.raises(PalyraError) as info:
            await store.append([draft(payload={"x": "a" * 1100})])
        assert info.value.code is ErrorCode.PAYLOAD_TOO_LARGE
        with pytest.raises(PalyraError) as info:
            await store.append([draft(entity_writes=[EntityWrite("runs", "r", b"x" * 101)])])
        assert info.value.code is ErrorCode.PAYLOAD_TOO_LARGE


async def test_tape_sequence_is_dense_per_run(store: JournalStore) -> None:
    await store.append([draft(run_id="a", tape=True), draft(run_id="b", tape=True)])
    await store.append(
        [draft(run_id="a", tape=True), draft(run_id="a"), draft(run_id="a", tape=True)]
    )
    assert store.last_tape_seq("a") == 2
    assert store.last_tape_seq("b") == 0
    assert store.last_tape_seq("zz") == -1
    assert [e.tape_seq for e in store.read_tape("a").events] == [0, 1, 2]
    # A run id that is a prefix of another does not leak into it.
    await store.append([draft(run_id="ab", tape=True)])
    assert [e.run_id for e in store.read_tape("a").events] == ["a", "a", "a"]


async def test_read_tape_paging(store: JournalStore) -> None:
    await store.append([draft(i, run_id="r", tape=True) for i in range(25)])
    page = store.read_tape("r", after_seq=-1, limit=10)
    assert [e.tape_seq for e in page.events] == list(range(10))
    assert page.next_after_seq == 9
    page = store.read_tape("r", after_seq=19, limit=10)
    assert [e.tape_seq for e in page.events] == list(range(20, 25))
    assert page.next_after_seq is None
    page = store.read_tape("r", after_seq=14, limit=10)
    assert page.next_after_seq is None and len(page.events) == 10
    assert len(store.read_tape("r", limit=0).events) == 1  # clamped to 1..1000
    assert len(store.read_tape("r", limit=10**6).events) == 25
    assert store.read_tape("r", after_seq=24).events == []


async def test_read_tape_byte_cap(store: JournalStore) -> None:
    await store.append(
        [draft(i, run_id="r", tape=True, payload={"x": "y" * 1000}) for i in range(5)]
    )
    page = store.read_tape("r", max_bytes=3000)
    assert len(page.events) == 2 and page.next_after_seq == 1
    with pytest.raises(PalyraError) as info:
        store.read_tape("r", max_bytes=100)
    assert info.value.code is ErrorCode.RESOURCE_EXHAUSTED


async def test_read_session_and_range(store: JournalStore) -> None:
    for i in range(10):
        await store.append([draft(i, session_id=f"s{i % 2}")])
    assert [e.position for e in store.read_session("s1")] == [2, 4, 6, 8, 10]
    assert [e.position for e in store.read_session("s1", after_position=4, limit=2)] == [6, 8]
    assert [e.position for e in store.read_range(7)] == [8, 9, 10]
    assert store.read_session("s", 0) == []
    assert store.read_range(10) == []


async def test_entities_commit_with_their_event(store: JournalStore) -> None:
    await store.append(
        [
            draft(
                entity_writes=[EntityWrite("runs", "r1", b"one"), EntityWrite("runs", "r2", b"two")]
            ),
            draft(entity_writes=[EntityWrite("sessions", "s", b"sess")]),
        ]
    )
    assert store.get_entity("runs", "r1") == b"one"
    assert store.scan_entities("runs") == [("r1", b"one"), ("r2", b"two")]
    assert store.scan_entities("runs", after_key="r1") == [("r2", b"two")]
    assert store.scan_entities("runs", prefix="r2") == [("r2", b"two")]
    assert store.scan_entities("runs", limit=1) == [("r1", b"one")]
    await store.append([draft(entity_writes=[EntityWrite("runs", "r1", None)])])
    assert store.get_entity("runs", "r1") is None
    assert store.get_entity("runs", "missing") is None
    with pytest.raises(InvalidArgument):
        store.get_entity("bogus", "k")
    # A rejected append writes no entity either.
    with pytest.raises(AlreadyExists):
        eid = store.read_range()[0].event_id
        await store.append([draft(event_id=eid, entity_writes=[EntityWrite("runs", "x", b"x")])])
    assert store.get_entity("runs", "x") is None


async def test_file_modes(store: JournalStore, data_dir: Path) -> None:
    await store.append([draft()])
    await store.checkpoint()
    assert stat.S_IMODE(os.stat(data_dir).st_mode) == 0o700
    jdir = data_dir / "journal"
    assert stat.S_IMODE(os.stat(jdir).st_mode) == 0o700
    for name in os.listdir(jdir):
        assert stat.S_IMODE(os.stat(jdir / name).st_mode) == 0o600, name


_LOCKER = """
import sys
from pathlib import Path
from palyra.core.errors import PalyraError
from palyra.journal import JournalStore
try:
    JournalStore.open(Path(sys.argv[1]))
except PalyraError as exc:
    print(exc.code.value)
    print(exc.message)
else:
    print("OPENED")
"""


async def test_second_writer_process_gets_data_dir_locked(data_dir: Path) -> None:
    # LMDB's writer lock (PostgreSQL serialises its writers itself).
    store = JournalStore.open(data_dir)
    try:
        await _second_writer_refused(data_dir)
    finally:
        store.close()


async def _second_writer_refused(data_dir: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _LOCKER, str(data_dir), stdout=asyncio.subprocess.PIPE
    )
    stdout, _ = await proc.communicate()
    code, message = stdout.decode().splitlines()[:2]
    assert code == "DATA_DIR_LOCKED"
    assert str(data_dir) in message and str(os.getpid()) in message


async def test_lock_is_released_on_close(data_dir: Path) -> None:
    JournalStore.open(data_dir).close()
    with JournalStore.open(data_dir) as again:
        with pytest.raises(PalyraError) as info:
            JournalStore.open(data_dir)
        assert info.value.code is ErrorCode.DATA_DIR_LOCKED
        assert again.head().count == 0


async def test_map_grows_instead_of_refusing(data_dir: Path) -> None:
    config = JournalConfig(sync=False, map_size=256 * 1024)
    async with JournalStore.open(data_dir, config=config) as store:
        for batch in range(40):
            await store.append([draft(i, payload={"x": "z" * 2000, "i": i}) for i in range(20)])
            assert batch >= 0
        stats = store.stats()
        assert stats.map_grows >= 1 and stats.map_size > 256 * 1024
        assert store.head().count == 800
        assert verify_store(store).ok


async def test_reopen_continues_chains(data_dir: Path) -> None:
    async with JournalStore.open(data_dir) as store:
        [a] = await store.append([draft(session_id="s", run_id="r", tape=True)])
    async with JournalStore.open(data_dir) as store:
        [b] = await store.append([draft(session_id="s", run_id="r", tape=True)])
        assert b.position == 2 and b.tape_seq == 1 and b.prev_hash == a.hash
        assert verify_store(store).ok


async def test_closed_and_readonly_stores_refuse_appends(data_dir: Path) -> None:
    store = JournalStore.open(data_dir)
    await store.append([draft()])
    store.close()
    store.close()  # idempotent
    with pytest.raises(PalyraError) as info:
        await store.append([draft()])
    assert info.value.code is ErrorCode.UNAVAILABLE
    with JournalStore.open(data_dir, config=JournalConfig(readonly=True)) as reader:
        assert reader.head().count == 1
        with pytest.raises(PalyraInternalError):
            await reader.append([draft()])


def test_readonly_open_of_missing_journal(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        JournalStore.open(tmp_path / "nothing", config=JournalConfig(readonly=True))


async def test_empty_append_is_a_no_op(store: JournalStore) -> None:
    assert await store.append([]) == []
    assert store.stats().commits == 0
