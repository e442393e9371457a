"""Two frames in flight: frame N+1 is planned while N is written, and a crash or a
failed write between them loses nothing answered and shows nothing unanswered.

The writer hands a frame to its log thread when more requests are queued, and
plans the next one meanwhile (``palyra.journal.write.writer``). These tests hold
the log thread inside frame N's write point (``Durability.hook``, the same hook
the power-loss test copies the files at) to pin the interleaving down.
"""

from __future__ import annotations

import asyncio
import shutil
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal import JournalConfig, JournalStore, StoredEvent, verify_store
from palyra.journal._env import journal_dir
from palyra.journal.write import writer as _writer
from palyra.journal.write.commitlog import FRAMES_AT, LOG_FILE
from palyra.journal.write.durable import Durability
from palyra.journal.write.inflight import LOG_THREAD

from .helpers import draft

_WAIT_S = 10.0
_TAKEN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


@pytest.fixture(autouse=True)
def _no_idle_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    # An idle writer collects the frame in flight to commit LMDB: with the log thread
    # held, it would wait there instead of planning the next frame the test queues.
    monkeypatch.setattr(_writer, "_APPLY_IDLE_S", 60.0)

_FRAME = struct.Struct(">4sQII")  # magic, seq, payload length, crc (format.md, "Commit log file")


class _Held:
    """A ``Durability.hook`` that holds the thread at its ``at``-th frame until released.

    The first frame (a lone append, written by the writer itself) is held too, so
    the appends queued meanwhile are taken as one batch of several: a frame the
    writer hands to its log thread.
    """

    def __init__(self, at: int, then: Callable[[], None] = lambda: None) -> None:
        self.frames: list[str] = []  # the thread of each frame's write
        self._at, self._then = at, then
        self.inside = [threading.Event() for _ in range(at + 1)]
        self.gate = [threading.Event() for _ in range(at + 1)]

    def __call__(self, label: str) -> None:
        if label != "frame":
            return
        self.frames.append(threading.current_thread().name)
        index = len(self.frames) - 1
        if index <= self._at:
            self.inside[index].set()
            assert self.gate[index].wait(_WAIT_S)
            if index == self._at:
                self._then()

    async def reached(self, index: int) -> None:
        assert await asyncio.to_thread(self.inside[index].wait, _WAIT_S)


async def _until(test: Callable[[], bool]) -> None:
    """Wait (bounded, not timed: the bound only ends a hung test) until ``test()``."""
    for _ in range(int(_WAIT_S / 0.005)):
        if test():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("never happened")


async def _frame_n_held(store: JournalStore, held: _Held) -> tuple[StoredEvent, list[Any]]:
    """a0 written alone; a1 and a2 queued behind it, written as frame N on the log thread,
    which ``held`` holds at N's write point. Returns a0's event and a1's, a2's futures."""
    first = asyncio.ensure_future(store.append([draft(0, session_id="s", run_id="r", tape=True)]))
    await held.reached(0)
    frame_n = [store.submit([draft(i, session_id="s", run_id="r", tape=True)]) for i in (1, 2)]
    held.gate[0].set()
    [a0] = await first
    await held.reached(1)
    return a0, frame_n


def _hooked(store: JournalStore, held: _Held) -> Durability:
    """The store's durability, with ``held`` as its write-point hook."""
    durable = store.env.durable
    assert isinstance(durable, Durability)
    durable.hook = held
    return durable


def _fail_frame_n() -> None:
    raise OSError("injected: frame N's write failed")


async def test_the_next_frame_is_planned_while_one_is_being_written(data_dir: Path) -> None:
    held = _Held(at=1)
    async with JournalStore.open(data_dir, config=JournalConfig(sync=True)) as store:
        durable = _hooked(store, held)
        a0, frame_n = await _frame_n_held(store, held)
        assert held.frames[1] == LOG_THREAD  # N is written off the writer's thread
        seq_n = durable.next_seq - 1
        # While N's write has not returned, a3 is planned and reserved as frame N+1 ...
        frame_n1 = store.submit([draft(3, session_id="s", run_id="r", tape=True)])
        await _until(lambda: durable.next_seq == seq_n + 2)
        # ... and nobody of N or N+1 has been answered: N is not done yet.
        assert not any(f.done() for f in [*frame_n, frame_n1])
        held.gate[1].set()
        events = [e for f in [*frame_n, frame_n1] for e in await f]
        durable.hook = None
        # N+1 was planned on N: one chain, dense positions and tape seqs.
        assert [e.position for e in events] == [a0.position + k for k in (1, 2, 3)]
        assert [e.tape_seq for e in events] == [1, 2, 3]
        assert events[2].prev_hash == events[1].hash
    report = verify_store(data_dir)
    assert report.ok and report.head_position == a0.position + 3, report.summary()


async def test_a_failed_write_of_frame_n_fails_frame_n1_planned_on_it(data_dir: Path) -> None:
    held = _Held(at=1, then=_fail_frame_n)
    async with JournalStore.open(data_dir, config=JournalConfig(sync=True)) as store:
        durable = _hooked(store, held)
        a0, frame_n = await _frame_n_held(store, held)
        seq_n = durable.next_seq - 1
        frame_n1 = store.submit([draft(3, session_id="s", run_id="r", tape=True)])
        await _until(lambda: durable.next_seq == seq_n + 2)  # N+1 planned on N
        held.gate[1].set()  # N's write "fails"
        for future in [*frame_n, frame_n1]:
            with pytest.raises(PalyraError) as raised:
                await future
            assert raised.value.code is ErrorCode.UNAVAILABLE
        durable.hook = None
        # Both taken back: the next append takes N's number, positions and tape seq.
        assert durable.next_seq == seq_n
        [after] = await store.append([draft(4, session_id="s", run_id="r", tape=True)])
        assert (after.position, after.tape_seq, after.prev_hash) == (
            a0.position + 1, 1, a0.hash)
        assert [e.event_id for e in store.read_range(0, 10)] == [a0.event_id, after.event_id]
    report = verify_store(data_dir)
    assert report.ok and report.head_position == a0.position + 1, report.summary()
    # Reopened (recovery from the log): still only what was answered.
    async with JournalStore.open(data_dir, config=JournalConfig(sync=True)) as store:
        assert [e.event_id for e in store.read_range(0, 10)] == [a0.event_id, after.event_id]


def _frames(log: bytes) -> dict[int, tuple[int, int]]:
    """seq -> (offset, length) of each commit frame in ``log``, read as format.md lays out."""
    found: dict[int, tuple[int, int]] = {}
    offset = FRAMES_AT
    while offset + _FRAME.size <= len(log):
        magic, seq, length, _crc = _FRAME.unpack_from(log, offset)
        if magic not in (b"PJCF", b"PJCS"):
            break
        if magic == b"PJCF":
            found[seq] = (offset, _FRAME.size + length)
        offset += _FRAME.size + length
    return found


async def test_frame_n1_on_disk_without_frame_n_is_not_recovered(
    data_dir: Path, tmp_path: Path
) -> None:
    # The image a crash would leave if N+1's bytes reached the disk and N's did not
    # (torn): the writer never lets it happen (N+1's write starts after N's returned),
    # and recovery would still stop before N, so neither becomes visible.
    images: list[Path] = []

    def copy() -> None:  # at N+1's write point: the files as a process crash leaves them
        image = tmp_path / "image" / "data"
        shutil.copytree(data_dir, image)
        images.append(image)

    held = _Held(at=2)
    async with JournalStore.open(data_dir, config=JournalConfig(sync=True)) as store:
        durable = _hooked(store, held)
        a0, frame_n = await _frame_n_held(store, held)
        seq_n = durable.next_seq - 1
        frame_n1 = store.submit([draft(3, session_id="s", run_id="r", tape=True)])
        await _until(lambda: durable.next_seq == seq_n + 2)
        held.gate[1].set()
        await held.reached(2)  # N+1 written: both frames are in the log
        copy()
        held.gate[2].set()
        for future in [*frame_n, frame_n1]:
            await future
        durable.hook = None
    [image] = images
    log_file = journal_dir(image) / LOG_FILE
    log = bytearray(log_file.read_bytes())
    frames = _frames(bytes(log))
    assert seq_n in frames and seq_n + 1 in frames
    offset, length = frames[seq_n]
    log[offset + length // 2 : offset + length] = bytes(length - length // 2)  # N torn
    log_file.write_bytes(bytes(log))
    report = verify_store(image)  # recovers the image (no writer holds it)
    assert report.ok and report.head_position == a0.position, report.summary()
    async with JournalStore.open(image, config=JournalConfig(sync=True)) as store:
        assert [e.event_id for e in store.read_range(0, 10)] == [a0.event_id]
        [after] = await store.append([draft(5, session_id="s", run_id="r", tape=True)])
        assert (after.position, after.tape_seq) == (a0.position + 1, 1)
    report = verify_store(image)
    assert report.ok and report.head_position == a0.position + 1, report.summary()


async def test_an_id_only_the_frame_in_flight_claims_is_refused_only_if_that_frame_is_written(
    data_dir: Path,
) -> None:
    # Every id of a batch taken by frame N, still being written: its callers hear
    # AlreadyExists only if N is durable. Here N's write fails, so the id was never
    # taken: they fail UNAVAILABLE (retryable) and a retry appends it.
    held = _Held(at=1, then=_fail_frame_n)
    async with JournalStore.open(data_dir, config=JournalConfig(sync=True)) as store:
        durable = _hooked(store, held)
        first = asyncio.ensure_future(store.append([draft(0)]))
        await held.reached(0)
        frame_n = [store.submit([draft(1, event_id=_TAKEN)]), store.submit([draft(2)])]
        held.gate[0].set()
        await first
        await held.reached(1)
        refused = store.submit([draft(3, event_id=_TAKEN)])  # taken by N, in flight
        held.gate[1].set()
        for future in [*frame_n, refused]:
            with pytest.raises(PalyraError) as raised:
                await future
            assert raised.value.code is ErrorCode.UNAVAILABLE
        durable.hook = None
        [again] = await store.append([draft(4, event_id=_TAKEN)])
        assert again.event_id == _TAKEN
    report = verify_store(data_dir)
    assert report.ok and report.head_position == again.position, report.summary()


async def test_a_batch_of_appends_and_a_checkpoint_signs_after_its_appends(
    data_dir: Path,
) -> None:
    # Queued behind a held lone frame, two appends and a checkpoint are taken as one
    # batch: its appends go in one frame, then the checkpoint signs the head after them.
    held = _Held(at=0)
    async with JournalStore.open(data_dir, config=JournalConfig(sync=True)) as store:
        _hooked(store, held)
        first = asyncio.ensure_future(store.append([draft(0, session_id="s")]))
        await held.reached(0)
        appends = [store.submit([draft(i, session_id="s")]) for i in (1, 2)]
        signed = asyncio.ensure_future(store.checkpoint())
        writer = store._writer
        assert writer is not None
        await _until(lambda: writer._queue.qsize() == 3)  # all three queued: one batch
        held.gate[0].set()
        [a0] = await first
        events = [e for f in appends for e in await f]
        checkpoint = await signed
        assert [e.position for e in events] == [a0.position + 1, a0.position + 2]
        assert checkpoint.position == events[-1].position
        assert checkpoint.head_hash == events[-1].global_hash
    report = verify_store(data_dir)
    assert report.ok, report.summary()
