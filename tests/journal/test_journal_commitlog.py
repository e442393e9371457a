"""The commit log's file format and its assumptions about LMDB, piece by piece.

The whole protocol under power loss is ``test_journal_power_loss.py``; these
pin the parts it rests on.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
from pathlib import Path
from typing import Any

import lmdb
import pytest

from palyra.journal import JournalConfig, JournalStore
from palyra.journal._env import journal_dir
from palyra.journal.write.commitlog import (
    FRAMES_AT,
    SLOT,
    CommitLog,
    encode_frame,
    encode_sync_frame,
    lmdb_meta,
    read_header,
    restore_lmdb_meta,
)
from palyra.journal.write.durable import RecordingTxn

from .helpers import draft


def test_frames_replay_in_order_skip_older_rounds_and_stop_at_a_torn_one(tmp_path: Path) -> None:
    log = CommitLog(tmp_path)
    for seq in (1, 2, 3):
        log.append(encode_frame(seq, [("_events", b"k%d" % seq, b"v")]))
    log.restart()  # a sync point: the next round starts over frames 1..3
    log.append(encode_frame(4, [("_events", b"k4", None)]))
    assert [seq for seq, _ in log.frames(3)] == [4]
    assert [seq for seq, _ in log.frames(0)] == []  # frame 1 is gone: nothing after it counts
    log.append(encode_frame(5, [("runs", b"r", b"x")]))
    end = log.offset
    log.append(encode_frame(6, [("runs", b"r", b"y")]))
    # Tear frame 6: one byte of its payload never reached the disk.
    with open(log.path, "r+b") as handle:
        handle.seek(end + 22)
        handle.write(b"\xff")
    assert [(seq, ops) for seq, ops in log.frames(4)] == [(5, [("runs", b"r", b"x")])]
    log.close()


def test_a_sync_frame_counts_only_where_it_stands_and_only_whole(tmp_path: Path) -> None:
    log = CommitLog(tmp_path)
    log.write_header(10, 2, b"h" * 40, 4096, clean=False)
    # An older round: frames 1..2 and a sync frame naming frame 1.
    log.append(encode_frame(1, [("runs", b"a", b"1")]))
    log.append(encode_sync_frame(7, 1, b"o" * 40, 4096) + encode_frame(2, [("runs", b"a", b"2")]))
    log.restart()
    # This round (after the header's frame 2): frames 3..4, the sync frame naming
    # frame 4 written with frame 5, as the writer does.
    log.append(encode_frame(3, [("runs", b"a", b"3")]))
    log.append(encode_frame(4, [("runs", b"a", b"4")]))
    base = log.sync_base()
    assert base is not None and (base.txnid, base.applied) == (10, 2)  # header: none yet
    mark = log.offset
    log.append(encode_sync_frame(12, 4, b"m" * 40, 4096) + encode_frame(5, [("runs", b"a", b"5")]))
    base = log.sync_base()
    assert base is not None and (base.txnid, base.applied, base.page_size) == (12, 4, 4096)
    assert base.meta == (b"m" * 40).ljust(256, b"\0") and not base.clean
    # Sync frames are not replayed: frames after 2 are 3, 4, 5.
    assert [seq for seq, _ in log.frames(2)] == [3, 4, 5]
    assert [seq for seq, _ in log.frames(4)] == [5]
    # A sync frame torn by the cut: neither it nor the frame after it counts.
    with open(log.path, "r+b") as handle:
        handle.seek(mark + 30)
        handle.write(b"\xff")
    base = log.sync_base()
    assert base is not None and (base.txnid, base.applied) == (10, 2)
    assert [seq for seq, _ in log.frames(2)] == [3, 4]
    log.close()


async def test_a_sync_point_between_restarts_costs_one_flush_and_no_header(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from palyra.journal.write import durable as _durable

    monkeypatch.setattr(_durable, "SYNC_EVERY_COMMITS", 8)
    # The cadence alone: an early write-back would defer each point until the device
    # returned it (tested below; the power-loss tests run with it).
    monkeypatch.setattr(_durable, "EARLY_WRITE_BACK", False)
    flushes: list[str] = []
    async with JournalStore.open(data_dir) as store:
        durable = store.env.durable
        assert durable is not None
        generation = read_header(journal_dir(data_dir)).generation  # type: ignore[union-attr]
        durable.hook = flushes.append
        before = durable.sync_points
        for i in range(36):  # the writer takes a sync point after its 36th commit
            await store.append([draft(i)])  # only after answering: stop short of one
        durable.hook = None
        # Every 8 commits: LMDB's flush, and its record rides on the next frame.
        assert durable.sync_points - before == 4
        assert flushes.count("lmdb-sync") == 4 and "header" not in flushes
        assert flushes.count("frame") == 36
        header = read_header(journal_dir(data_dir))
        assert header is not None and header.generation == generation
        base = durable.log.sync_base()
        assert base is not None and base.applied == 32  # written with frame 33


class _ThreadedFlushes:
    """The LMDB environment, noting which thread asked each flush."""

    def __init__(self, env: Any, seen: list[str]) -> None:
        self._env = env
        self._seen = seen

    def sync(self, force: bool = False) -> None:
        self._env.sync(force)
        self._seen.append(threading.current_thread().name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


async def test_a_due_sync_point_has_its_pages_written_back_off_the_writers_thread_first(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from palyra.journal.write import durable as _durable

    monkeypatch.setattr(_durable, "SYNC_EVERY_COMMITS", 8)
    async with JournalStore.open(data_dir) as store:
        durable = store.env.durable
        assert durable is not None
        flushes: list[str] = []
        durable._env = _ThreadedFlushes(durable._env, flushes)
        before = durable.sync_points
        for i in range(80):
            await store.append([draft(i)])
        durable._env = durable._env._env
        assert durable.sync_points - before >= 4
        own = [i for i, name in enumerate(flushes) if name != "palyra-lmdb-flush"]
        # Each sync point's own flush (the writer's thread) came right after an early one.
        assert len(own) == durable.sync_points - before
        assert all(i > 0 and flushes[i - 1] == "palyra-lmdb-flush" for i in own)
        base = durable.log.sync_base()
        assert base is not None and base.applied > 8  # the points are still recorded


async def test_a_sync_point_comes_when_lmdb_grew_enough_since_the_pinned_one(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Big commits would hold back many pages per interval: growth bounds it too.
    from palyra.journal.write import durable as _durable

    monkeypatch.setattr(_durable, "SYNC_EVERY_COMMITS", 1 << 30)
    monkeypatch.setattr(_durable, "SYNC_EVERY_S", 1e9)
    monkeypatch.setattr(_durable, "_ROOM_READ_EVERY", 4)
    async with JournalStore.open(data_dir) as store:
        durable = store.env.durable
        assert durable is not None
        before = durable.sync_points
        for i in range(20):
            await store.append([draft(i, payload={"pad": "x" * 20_000})])
        assert durable.sync_points == before  # 20 commits of ~5 pages: under the bound
        monkeypatch.setattr(_durable, "SYNC_EVERY_GROWTH", 16 * 4096)
        for i in range(20):
            await store.append([draft(i, payload={"pad": "x" * 20_000})])
            store.read_range(0, 1)  # LMDB commits what was answered: its size is read
        assert durable.sync_points - before >= 1  # (freed pages get reused in between)


def _lmdb_commits_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """No idle commit (a minute) and no timed sync point: LMDB commits when a reader asks."""
    from palyra.journal.write import durable as _durable
    from palyra.journal.write import writer as _writer

    monkeypatch.setattr(_writer, "_APPLY_IDLE_S", 60.0)
    monkeypatch.setattr(_durable, "SYNC_EVERY_S", 1e9)


async def test_frames_share_lmdb_commits_and_a_waiting_reader_gets_its_own_writes_at_once(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writer commits LMDB for many frames at once; a reader that finds answered
    # frames not yet in LMDB asks it to commit now (else it would wait out the idle
    # delay, here a minute, and the test would time out).
    _lmdb_commits_only_when_asked(monkeypatch)
    labels: list[str] = []
    async with JournalStore.open(data_dir) as store:
        durable = store.env.durable
        assert durable is not None
        durable.hook = labels.append
        ids = [e.event_id for i in range(10) for e in await store.append([draft(i)])]
        assert labels.count("frame") == 10 and labels.count("commit") == 0
        # From another thread and from the event loop's own: both see every event.
        seen = await asyncio.wait_for(
            asyncio.to_thread(lambda: [e.event_id for e in store.read_range(0, 100)]), 10)
        assert seen == ids and labels.count("commit") == 1
        [late] = await store.append([draft(10)])
        assert [e.event_id for e in store.read_range(0, 100)] == [*ids, late.event_id]
        assert labels.count("commit") == 2
        durable.hook = None


def test_header_slots_alternate_and_a_torn_one_falls_back(tmp_path: Path) -> None:
    log = CommitLog(tmp_path)
    assert log.header is None and read_header(tmp_path) is None
    log.write_header(10, 3, b"m" * 40, 4096, clean=False)
    log.write_header(12, 5, b"n" * 40, 4096, clean=True)
    header = read_header(tmp_path)
    assert header is not None and (header.txnid, header.applied, header.clean) == (12, 5, True)
    with open(log.path, "r+b") as handle:  # tear the newer slot
        handle.seek((header.generation % 2) * SLOT + 30)
        handle.write(b"\x00\x01")
    older = read_header(tmp_path)
    assert older is not None and (older.txnid, older.applied, older.clean) == (10, 3, False)
    assert log.size >= FRAMES_AT
    log.close()


def test_lmdb_meta_layout_is_what_recovery_assumes(tmp_path: Path) -> None:
    env = lmdb.open(str(tmp_path), max_dbs=2, sync=False)
    db = env.open_db(b"x")
    for i in range(5):
        with env.begin(write=True) as txn:
            txn.put(b"%d" % i, b"v", db=db)
    env.sync(True)
    snapshot_txnid = env.info()["last_txnid"]
    txnid, meta = lmdb_meta(tmp_path / "data.mdb", 4096)
    assert txnid == snapshot_txnid
    with env.begin(write=True) as txn:
        txn.put(b"later", b"v", db=db)
    env.sync(True)
    env.close()
    restore_lmdb_meta(tmp_path / "data.mdb", 4096, meta)
    env = lmdb.open(str(tmp_path), max_dbs=2)
    assert env.info()["last_txnid"] == snapshot_txnid
    with env.begin(db=env.open_db(b"x")) as txn:
        assert txn.get(b"later") is None and txn.get(b"4") == b"v"
    env.close()
    with pytest.raises(ValueError):
        restore_lmdb_meta(tmp_path / "data.mdb", 4096, b"\0" * 256)


async def test_one_logged_write_per_commit_and_few_lmdb_flushes(data_dir: Path) -> None:
    async with JournalStore.open(data_dir) as store:
        durable = store.env.durable
        assert durable is not None and not store.env.env.flags()["sync"]
        before = durable.sync_points
        for i in range(130):
            await store.append([draft(i, run_id="r", tape=True)])
        assert store.stats().commits == 130
        assert durable.sync_points - before <= 3  # every 64 commits (or a second)
    header = read_header(journal_dir(data_dir))
    assert header is not None and header.clean and header.applied == 130


async def test_sync_off_is_a_flush_policy_of_the_same_commit_path(data_dir: Path) -> None:
    # sync=False runs the commit log like sync=True (frames, sync points, recovery),
    # only without the flushes: no O_DSYNC on the log, a sparse file, no LMDB flush.
    async with JournalStore.open(data_dir, config=JournalConfig(sync=False)) as store:
        await store.append([draft(0)])
        durable = store.env.durable
        assert durable is not None
        assert not fcntl.fcntl(durable.log._fd, fcntl.F_GETFL) & os.O_DSYNC
        assert [seq for seq, _ops in durable.log.frames(0)] == [1]
    log = journal_dir(data_dir) / "commit.log"
    assert log.stat().st_blocks * 512 < log.stat().st_size  # sparse: never pre-zeroed
    header = read_header(journal_dir(data_dir))
    assert header is not None and header.clean and header.applied == 1


def test_reopen_after_a_kill_replays_what_lmdb_lacks(data_dir: Path) -> None:
    # A writer that never closes: its last commits are only in the log and the
    # page cache; a new open rolls LMDB back to the sync point and replays them.
    async def write() -> list[str]:
        store = JournalStore.open(data_dir)
        ids = [e.event_id for i in range(10) for e in await store.append([draft(i)])]
        assert store.env.durable is not None
        store.env.durable.unpin()
        store._writer.stop()  # type: ignore[union-attr]
        store.env.env.close()  # no clean sync point, as after SIGKILL
        store.env._release_lock()
        store.env.durable.log.close()
        return ids

    ids = asyncio.run(write())
    header = read_header(journal_dir(data_dir))
    assert header is not None and not header.clean
    with JournalStore.open(data_dir) as store:
        assert [e.event_id for e in store.read_range(0, 100)] == ids


def test_reopen_rolls_lmdb_back_to_the_newest_sync_frame(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The newest durable sync point is a sync frame, not the header: a reopen
    # after a system crash rolls LMDB back to that frame's meta page (not the
    # header's older one, whose pages the writer no longer protects).
    from palyra.journal.write import durable as _durable

    monkeypatch.setattr(_durable, "SYNC_EVERY_COMMITS", 4)
    monkeypatch.setattr(_durable, "EARLY_WRITE_BACK", False)  # points at set commits

    async def write() -> tuple[list[str], int]:
        store = JournalStore.open(data_dir)
        ids = [e.event_id for i in range(10) for e in await store.append([draft(i)])]
        durable = store.env.durable
        assert durable is not None
        base = durable.log.sync_base()
        assert base is not None and base.applied == 8  # with frame 9 (frame 10's is pending)
        durable.unpin()
        store._writer.stop()  # type: ignore[union-attr]
        store.env.env.close()  # no clean sync point, as after a crash
        store.env._release_lock()
        durable.log.close()
        return ids, base.txnid

    ids, txnid = asyncio.run(write())
    directory = journal_dir(data_dir)
    header = read_header(directory)
    assert header is not None and not header.clean and header.txnid < txnid
    seen: list[int] = []
    real = _durable.restore_lmdb_meta

    def spy(data_file: Path, page_size: int, meta: bytes) -> None:
        seen.append(int.from_bytes(meta[144:152], "little"))
        real(data_file, page_size, meta)

    monkeypatch.setattr(_durable, "restore_lmdb_meta", spy)
    with JournalStore.open(data_dir) as store:
        assert [e.event_id for e in store.read_range(0, 100)] == ids
    assert seen == [txnid]


async def test_a_read_between_the_frame_and_the_lmdb_commit_waits_for_the_commit(
    tmp_path: Path,
) -> None:
    """Callers are answered once the frame is durable, before LMDB takes the same writes.

    A read that starts in between (here: from another thread, once the callers
    have been answered and the writer is about to hand the writes to LMDB) must
    not see the journal without that commit: it waits until LMDB holds it.
    Without the wait, the read finishes inside the window and misses the event.
    """
    import threading

    async with JournalStore.open(tmp_path) as store:
        await store.append([draft(0)])
        # The answer may come before the writer hands that commit to LMDB: a read
        # waits until it has, so the patch below never sees the first commit.
        assert len(store.read_range(0, 10)) == 1
        durable = store.env.durable
        assert durable is not None
        seen: list[list[int]] = []
        reader_done = threading.Event()
        real_apply = durable.apply

        def read() -> None:
            seen.append([e.position for e in store.read_range(0, 10)])
            reader_done.set()

        def slow_apply(txn: Any) -> None:
            if not seen:
                thread = threading.Thread(target=read)
                thread.start()
                # Give the reader every chance to finish inside the window.
                reader_done.wait(0.3)
            real_apply(txn)

        durable.apply = slow_apply  # type: ignore[method-assign]
        [event] = await store.append([draft(1)])
        # The answer may come before the writer reaches apply: restore it only after.
        assert await asyncio.to_thread(reader_done.wait, 10)
        durable.apply = real_apply  # type: ignore[method-assign]
        assert seen == [[1, event.position]]
        # The caller reads its own write at once, whatever LMDB's timing.
        assert [e.position for e in store.read_range(0, 10)] == [1, 2]


async def test_an_lmdb_commit_refused_after_the_answer_fails_reads_until_a_reopen_replays_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller was told yes (its frame is durable); if LMDB then refuses the same
    writes, reads and appends of this store fail instead of showing a journal without
    them, and reopening replays the frame."""
    from palyra.core.errors import ErrorCode, PalyraError
    from palyra.journal.write import durable as _durable

    def refuse(txns: object) -> None:
        raise lmdb.Error("simulated: LMDB refused the writes")

    store = JournalStore.open(tmp_path)
    await store.append([draft(0)])
    assert len(store.read_range(0, 10)) == 1  # a read waits until LMDB holds that commit
    monkeypatch.setattr(_durable.RecordingTxn, "put_all", staticmethod(refuse))
    [event] = await store.append([draft(1)])  # answered: the frame is the commit
    with pytest.raises(PalyraError) as refused:
        store.read_range(0, 10)
    assert refused.value.code is ErrorCode.UNAVAILABLE
    with pytest.raises(PalyraError) as refused:
        await store.append([draft(2)])
    assert refused.value.code is ErrorCode.UNAVAILABLE
    store.close()
    with JournalStore.open(tmp_path) as store:
        assert [(e.position, e.event_id) for e in store.read_range(0, 10)] == [
            (1, store.read_range(0, 1)[0].event_id), (2, event.event_id)]


async def test_the_room_check_counts_the_pages_of_the_lmdb_transaction_still_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LMDB's ``env.info()`` does not count the pages of a write transaction still open,
    and the writer keeps one open across many frames. The room check before each frame
    must count what the frames since its last reading demanded (and a reading taken
    before LMDB committed them must take off what they were charged): a check that trusted ``env.info()`` here would let a
    frame be answered that LMDB then has no room for (the store refuses until a
    reopen). With the check right, the map grows before the frame instead."""
    from palyra.journal import verify_store
    from palyra.journal.write import durable as _durable
    from palyra.journal.write import writer as _writer

    # Every frame into one open transaction: no idle, count or time commit.
    monkeypatch.setattr(_writer, "_APPLY_IDLE_S", 60.0)
    monkeypatch.setattr(_writer, "_APPLY_EVERY_FRAMES", 1 << 30)
    monkeypatch.setattr(_durable, "SYNC_EVERY_S", 1e9)
    # Read LMDB's room before every frame (when allowed): a check that ignored the
    # open transaction would then trust a reading that misses its pages.
    monkeypatch.setattr(_durable, "_ROOM_READ_EVERY", 1)
    store = JournalStore.open(tmp_path, config=JournalConfig(map_size=1 << 17))
    try:
        # ≈ 1.6 MB into the open transaction: far more than the room any one
        # frame asks for, so a reading that misses its pages overstates the room.
        for i in range(400):
            await store.append([draft(i, payload={"x": "z" * 4000, "i": i})])
        assert store.stats().map_grows >= 1
        assert store.head().count == 400
        assert verify_store(store).ok
    finally:
        store.close()
    with JournalStore.open(tmp_path) as store:
        assert store.head().count == 400 and verify_store(store).ok


async def test_the_room_is_read_without_making_lmdb_commit_the_frames_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frame whose room check runs short while LMDB has not committed the frames
    before it reads LMDB's room again, less what those frames were charged, and goes
    on: LMDB is not made to commit them first (which also drains a frame in flight).
    A reading with every frame committed grows the map to leave room for many frames
    like the one checked, so such readings suffice. Here every frame is charged about
    a quarter of a 4 MiB map: LMDB commits once in several frames, not every other
    one, and everything is there after a reopen."""
    from palyra.journal import verify_store
    from palyra.journal.write import durable as _durable
    from palyra.journal.write import writer as _writer

    # LMDB commits only when a frame's room check makes it (or at close).
    monkeypatch.setattr(_writer, "_APPLY_IDLE_S", 60.0)
    monkeypatch.setattr(_writer, "_APPLY_EVERY_FRAMES", 1 << 30)
    monkeypatch.setattr(_durable, "SYNC_EVERY_S", 1e9)
    store = JournalStore.open(tmp_path, config=JournalConfig(map_size=4 << 20))
    durable = store.env.durable
    assert durable is not None
    labels: list[str] = []
    durable.hook = labels.append
    try:
        for i in range(48):  # 48 frames of 64 events: each frame ~70 writes
            await store.append([draft(i * 64 + k, session_id=f"s{k % 4}") for k in range(64)])
        frames, commits = labels.count("frame"), labels.count("commit")
        assert frames == 48
        assert commits * 8 <= frames, labels
        assert store.head().count == 48 * 64
    finally:
        durable.hook = None
        store.close()
    with JournalStore.open(tmp_path) as store:
        assert store.head().count == 48 * 64 and verify_store(store).ok


async def test_answered_frames_not_yet_in_lmdb_count_for_ids_heads_and_tape_seqs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answered frames reach the open LMDB transaction later, several at once. Until
    then an id they claim is taken all the same, and a session head or tape seq the
    writer no longer remembers is read only after they are in (memory of one entry
    here, so every other append reads one back)."""
    from palyra.core.errors import AlreadyExists
    from palyra.journal import verify_store
    from palyra.journal.write import writer as _writer

    monkeypatch.setattr(_writer, "_APPLY_IDLE_S", 60.0)
    monkeypatch.setattr(_writer, "_APPLY_EVERY_FRAMES", 1 << 30)
    monkeypatch.setattr(_writer, "_APPLY_EVERY_OPS", 1 << 30)
    monkeypatch.setattr(_writer, "_MEMORY_LIMIT", 1)
    async with JournalStore.open(tmp_path) as store:
        [first] = await store.append([draft(0, event_id="01J3TAKEN00000000000000000")])
        with pytest.raises(AlreadyExists):
            await store.append([draft(1, event_id=first.event_id)])
        with pytest.raises(AlreadyExists):  # twice in one batch of several
            await store.append([draft(2, event_id="01J3TWECE00000000000000000"),
                                draft(3, event_id="01J3TWECE00000000000000000")])
        for i in range(30):  # session heads read back (no tape: no other reads)
            await store.append([draft(i, session_id=f"s{i % 3}")])
        for i in range(40):  # tape seqs read back (one session: its head is remembered)
            await store.append([draft(i, session_id="t", run_id=f"r{i % 2}", tape=True)])
        assert store.head().count == 71
        assert verify_store(store).ok
        for run in ("r0", "r1"):
            seqs = [e.tape_seq for e in store.read_range(0, 100) if e.run_id == run]
            assert seqs == list(range(20))


def test_planned_writes_keep_their_order_when_a_delete_is_among_them(tmp_path: Path) -> None:
    # put_all puts answered frames' planned writes with one putmulti per sub-DB
    # unless one of them is a delete: then one at a time, in order, so a delete
    # after a put of the same key wins.
    env = lmdb.open(str(tmp_path), max_dbs=2, map_size=1 << 20)
    rows, other = env.open_db(b"rows"), env.open_db(b"other")
    dbs = {"rows": rows, "other": other}
    with env.begin(write=True) as txn:
        first = RecordingTxn.recorded(
            txn, [("rows", b"a", b"1"), ("rows", b"b", b"1"), ("other", b"x", b"1")], dbs, "")
        second = RecordingTxn.recorded(txn, [("rows", b"a", None), ("rows", b"a2", b"2")], dbs, "")
        assert txn.get(b"b", db=rows) is None  # planned: nothing written yet
        RecordingTxn.put_all([first, second])
    with env.begin() as txn:
        assert txn.get(b"a", db=rows) is None
        assert [txn.get(k, db=rows) for k in (b"a2", b"b")] == [b"2", b"1"]
        assert txn.get(b"x", db=other) == b"1"
    env.close()


def test_grouped_frames_put_a_table_at_a_time_in_frame_order(tmp_path: Path) -> None:
    # Frames the planner grouped by sub-DB (puts only) go in with one putmulti per
    # sub-DB, their writes gathered in C: a key two frames put holds the later value,
    # whatever order each frame's tables came in, and every sub-DB gets its writes.
    env = lmdb.open(str(tmp_path), max_dbs=3, map_size=1 << 20)
    dbs = {name: env.open_db(name.encode()) for name in ("rows", "other", "third")}
    frames = [
        {"rows": [(b"a", b"1"), (b"b", b"1")], "other": [(b"x", b"1")]},
        {"other": [(b"x", b"2"), (b"y", b"2")], "rows": [(b"a", b"2")]},
        {"third": [(b"t", b"3")], "rows": [(b"a", b"3"), (b"c", b"3")]},
        {"rows": [(b"b", b"4")]},
    ]
    with env.begin(write=True) as txn:
        txns = [RecordingTxn.recorded(txn, [(n, k, v) for n, w in tables.items() for k, v in w],
                                      dbs, "", tables) for tables in frames]  # fmt: skip
        RecordingTxn.put_all(txns)
    with env.begin() as txn:
        held = {name: dict(txn.cursor(db=db)) for name, db in dbs.items()}
    assert held == {"rows": {b"a": b"3", b"b": b"4", b"c": b"3"},
                    "other": {b"x": b"2", b"y": b"2"}, "third": {b"t": b"3"}}  # fmt: skip
    env.close()


async def test_a_readers_ask_queued_behind_appends_commits_lmdb_within_the_batch(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A reader's ask for LMDB to hold the answered frames (JournalEnv.on_wait) that
    # the writer meets while taking queued appends into a batch is honoured there,
    # not dropped: with no idle moment (here a minute) nothing else would commit.
    _lmdb_commits_only_when_asked(monkeypatch)
    labels: list[str] = []
    gate, inside = threading.Event(), threading.Event()

    def hook(label: str) -> None:
        labels.append(label)
        if label == "frame" and not gate.is_set():
            inside.set()
            gate.wait(10)  # the writer holds here, inside the first commit

    async with JournalStore.open(data_dir) as store:
        durable, ask = store.env.durable, store.env.on_wait
        assert durable is not None and ask is not None
        durable.hook = hook
        first = asyncio.ensure_future(store.append([draft(0)]))
        assert await asyncio.to_thread(inside.wait, 10)
        # Queued while the writer is busy: an append, the ask, another append.
        queued = [store.submit([draft(1)])]
        ask()
        queued.append(store.submit([draft(2)]))
        gate.set()
        await first
        await asyncio.wait_for(asyncio.gather(*queued), 10)
        assert labels == ["frame", "commit", "frame"]
        durable.hook = None
