"""Simulated power loss at every write point of the commit path: no acknowledged event lost.

A durable store runs a busy workload (concurrent multi-event appends with
entity writes, checkpoints, a tiny commit log that restarts often, a tiny
map that grows) while a hook copies the journal's files at every write point
of the commit path: after a frame is logged (with the sync frame of the last
sync point, if one is pending), after LMDB commits without a flush (the
writer's open transaction, holding one or more frames), after LMDB is flushed,
after the log header records a sync point.

What a power cut leaves on disk at such a point is modelled from those
copies. ``commit.log`` is written with ``O_DSYNC``: all of it is on disk,
except that the write in flight may be torn (a prefix of it). ``data.mdb`` is
what the last LMDB flush made durable (the file as it was when that flush
began, since commits go on during it) plus *any subset* of the 4 KiB pages
written since (the page cache writes them back in no particular order, meta
pages included): none, all, only the meta pages, all but the meta pages, and
random subsets. Every such image is recovered by opening it, and must verify
and hold every event acknowledged before the cut, with dense tape seqs, and
take new appends.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from palyra.journal import (
    EntityWrite,
    EventDraft,
    JournalConfig,
    JournalStore,
    verify_store,
)
from palyra.journal._env import journal_dir
from palyra.journal.write import commitlog as _commitlog
from palyra.journal.write import durable as _durable
from palyra.journal.write import writer as _writer
from palyra.journal.write.commitlog import LOG_FILE

PAGE = 4096


@dataclass
class _Snapshot:
    label: str
    data: bytes
    log: bytes
    base: bytes  # data.mdb as of the last LMDB flush
    acked: int  # acknowledged events when the snapshot was taken


@dataclass
class _Recorder:
    directory: Path
    base: bytes = b""
    snapshots: list[_Snapshot] = field(default_factory=list)
    acked: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def files(self) -> tuple[bytes, bytes]:
        return (
            (self.directory / "data.mdb").read_bytes(),
            (self.directory / LOG_FILE).read_bytes(),
        )

    def point(self, label: str) -> None:
        data, log = self.files()
        with self.lock:
            self.snapshots.append(_Snapshot(label, data, log, self.base, len(self.acked)))

    def flushed(self, data: bytes | None = None) -> None:
        """LMDB's file was just flushed (seen on the real call, not taken from a label):
        ``data`` is the file as it was when the flush began (default: as it is now)."""
        self.base = self.files()[0] if data is None else data


class _FlushSpy:
    """The LMDB environment, with its flushes reported to the recorder."""

    def __init__(self, env: Any, recorder: _Recorder) -> None:
        self._env = env
        self._recorder = recorder

    def sync(self, force: bool = False) -> None:
        # Only what was written before the flush began is surely on disk after it: the
        # writer goes on committing while a flush runs on its own thread.
        before = self._recorder.files()[0]
        self._env.sync(force)
        if force:
            self._recorder.flushed(before)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


async def _workload(
    store: JournalStore, recorder: _Recorder, appenders: int, calls: int, lone: bool = False
) -> None:
    async def appender(k: int) -> None:
        for n in range(calls):
            drafts = [
                EventDraft(
                    "power.test",
                    f"a{k}",
                    session_id=f"s{(k + i) % 3}" if n % 4 == 3 else f"s{k % 3}",
                    run_id=f"r{k % 2}",
                    tape=i != 1,
                    payload={"k": k, "n": n, "i": i, "pad": "x" * (n * 37 % 300)},
                    entity_writes=(EntityWrite("runs", f"r{k % 2}", b"%d" % n),),
                )
                for i in range(1 if lone else 1 + (n + k) % 3)
            ]
            for event in await store.append(drafts):
                with recorder.lock:
                    recorder.acked.append(event.event_id)
            if k == 0 and n % 5 == 4:
                await store.checkpoint()

    await asyncio.gather(*(appender(k) for k in range(appenders)))


def _pages(data: bytes) -> int:
    return (len(data) + PAGE - 1) // PAGE


def _data_images(snapshot: _Snapshot, rng: random.Random) -> list[tuple[str, bytes]]:
    base, now = snapshot.base, snapshot.data
    changed = [
        p
        for p in range(_pages(now))
        if now[p * PAGE : (p + 1) * PAGE] != base[p * PAGE : (p + 1) * PAGE]
    ]

    def image(pages: set[int]) -> bytes:
        out = bytearray(base.ljust(len(now), b"\0"))
        for p in pages:
            out[p * PAGE : (p + 1) * PAGE] = now[p * PAGE : (p + 1) * PAGE]
        return bytes(out)

    metas = {p for p in changed if p < 2}
    subsets = {
        "no-unflushed-page": set(),
        "all-pages": set(changed),
        "only-meta-pages": metas,
        "all-but-meta-pages": set(changed) - metas,
    }
    for r in range(2):
        subsets[f"random-{r}"] = {p for p in changed if rng.random() < 0.5}
    return [(name, image(pages)) for name, pages in subsets.items()]


def _log_images(
    snapshot: _Snapshot, before: _Snapshot | None, rng: random.Random
) -> list[tuple[str, bytes]]:
    images = [("log-as-written", snapshot.log)]
    if before is not None and snapshot.label in ("frame", "header"):
        # The cut came during this write: only a prefix of it reached the disk.
        old, new = before.log, snapshot.log
        diff = [i for i in range(min(len(old), len(new))) if old[i] != new[i]]
        if diff:
            start, end = diff[0], diff[-1] + 1
            cut = rng.randrange(start, end)
            images.append(("log-torn-write", new[:cut] + old[cut:]))
    return images


def _check_image(root: Path, data: bytes, log: bytes, must_have: list[str], label: str) -> bool:
    """Recover one power-cut image and check it; True when its newest sync point is a sync frame."""
    directory = journal_dir(root)
    directory.mkdir(parents=True)
    (directory / "data.mdb").write_bytes(data)
    (directory / LOG_FILE).write_bytes(log)
    reader = _commitlog.CommitLog(directory)
    header, base = reader.header, reader.sync_base()
    reader.close()
    from_sync_frame = header is not None and base is not None and base.applied > header.applied
    # A read-only verify first: it must recover the dir itself (no writer holds the lock).
    report = verify_store(root)
    assert report.ok, (label, report.summary())
    with JournalStore.open(root, config=JournalConfig(map_size=1 << 17)) as store:
        ids: set[str] = set()
        tapes: dict[str, list[int]] = {}
        after = 0
        while page := store.read_range(after, 1000):
            for event in page:
                ids.add(event.event_id)
                if event.tape_seq >= 0:
                    tapes.setdefault(event.run_id, []).append(event.tape_seq)
            after = page[-1].position
        missing = set(must_have) - ids
        assert not missing, (label, f"{len(missing)} acknowledged events lost")
        for run_id, seqs in tapes.items():
            assert seqs == list(range(len(seqs))), (label, run_id)
            assert store.last_tape_seq(run_id) == len(seqs) - 1, (label, run_id)
        asyncio.run(_append_one(store))
    report = verify_store(root)
    assert report.ok and report.head_position == after + 1, (label, report.summary())
    return from_sync_frame


async def _append_one(store: JournalStore) -> None:
    [event] = await store.append([EventDraft("after.recovery", "t", run_id="r0", tape=True)])
    assert event.tape_seq == store.last_tape_seq("r0")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("log_size", "restart_at", "lone"),
    [(48 * 1024, 32 * 1024, False), (20 * 1024, 1 << 30, False), (24 * 1024, 16 * 1024, True)],
    ids=["early", "when-full", "lone"])
def test_power_loss_at_every_write_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log_size: int, restart_at: int, lone: bool
) -> None:
    # A log that restarts every few commits and a map that must grow: every
    # branch of the commit path runs many times in a short workload. The log
    # restarts after a sync point once it is 2/3 full ("early"), or only when
    # a frame does not fit, with frames still waiting in the open LMDB
    # transaction ("when-full"). "lone": one appender of one event at a time
    # (each append its own frame, planned and framed like any batch).
    monkeypatch.setattr(_durable, "SYNC_EVERY_COMMITS", 5)
    monkeypatch.setattr(_commitlog, "LOG_SIZE", log_size)
    monkeypatch.setattr(_durable, "SYNC_EVERY_BYTES", restart_at)
    # The hook's copies are slow: without this the writer would find itself idle
    # and commit LMDB after every frame, never holding several in one transaction.
    monkeypatch.setattr(_writer, "_APPLY_IDLE_S", 5.0)
    seed = int(os.environ.get("PALYRA_CRASH_SEED", "0")) or 1124
    rng = random.Random(seed)
    root = tmp_path / "live"
    store = JournalStore.open(root, config=JournalConfig(map_size=1 << 17))
    durable = store.env.durable
    assert durable is not None
    recorder = _Recorder(journal_dir(root))
    recorder.flushed()  # opening ended with a sync point
    # The model takes "durable" from the real calls: the log's O_DSYNC flag
    # and LMDB's flushes, never from the code's own labels.
    assert fcntl.fcntl(durable.log._fd, fcntl.F_GETFL) & os.O_DSYNC
    durable._env = _FlushSpy(durable._env, recorder)
    durable.hook = recorder.point
    try:
        if lone:
            asyncio.run(_workload(store, recorder, appenders=1, calls=40, lone=True))
        else:
            asyncio.run(_workload(store, recorder, appenders=4, calls=10))
        grows = store.stats().map_grows
    finally:
        durable.hook = None
        store.close()
    assert grows >= 1 and durable.sync_points >= 5
    labels = {s.label for s in recorder.snapshots}
    assert labels == {"frame", "commit", "lmdb-sync", "header"}
    # LMDB took several frames in one commit at times (the writer's open transaction).
    every = [s.label for s in recorder.snapshots]
    assert every.count("commit") < every.count("frame")
    checked = from_sync_frames = 0
    previous: _Snapshot | None = None
    for index, snapshot in enumerate(recorder.snapshots):
        must_have = recorder.acked[: snapshot.acked]
        for log_name, log in _log_images(snapshot, previous, rng):
            for data_name, data in _data_images(snapshot, rng):
                label = f"#{index} after {snapshot.label}: {log_name}, {data_name}"
                if _check_image(tmp_path / f"img-{checked}", data, log, must_have, label):
                    from_sync_frames += 1
                checked += 1
        previous = snapshot
    assert checked >= 6 * len(recorder.snapshots)
    if restart_at < log_size:
        # Both kinds of sync point were the recovery's base: the header (a restart)
        # and a sync frame written with a later commit's frame.
        assert 0 < from_sync_frames < checked
