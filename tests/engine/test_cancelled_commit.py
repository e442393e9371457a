"""A run's commit stays whole when its task is cancelled while the append is queued.

The committing task hears its cancellation only once the append it handed to the
journal has settled, and by then the run's record and loop state follow the
durable tape (``Batch.commit_locked``: the append shielded and awaited to its end): a
cancel never leaves memory behind or ahead of the journal. Observed on a real LMDB journal.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from palyra_gen.palyra import v1 as pb

from palyra.core.ids import new_ulid
from palyra.engine.model.fold import LoopState
from palyra.engine.model.records import IdentityRec, RunRecord
from palyra.engine.run.writer import RunWriter
from palyra.journal import JournalConfig, JournalStore


def _writer(store: JournalStore) -> RunWriter:
    record = RunRecord(run_id=new_ulid(), session_id=new_ulid(), state="in_progress",
                       identity=IdentityRec("user:t", "d"), created_ms=1, updated_ms=1)
    return RunWriter(store, record, LoopState(state="in_progress"), lambda: 2)


async def test_a_cancel_waits_for_the_queued_append_and_memory_follows_it(
        tmp_path: Path) -> None:
    store = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=True))
    try:
        writer = _writer(store)
        batch = writer.batch().add(pb.AgentLoop(phase=pb.AgentLoopPhase.TURN_COMPLETED,
                                                turn=1))
        committing = asyncio.ensure_future(batch.commit())
        await asyncio.sleep(0)  # the append is queued; the task awaits its landing
        assert not committing.done()
        committing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await committing
        # Cancelled only after the append settled: it is durable, and memory moved with it.
        tape = store.read_tape(writer.record.run_id, -1, 10).events
        assert [e.kind for e in tape] == ["tape.agent_loop"]
        assert writer.record.tape_len == 1 and writer.loop.tape_len == 1
        # The next batch follows on from the cancelled one's record.
        await writer.batch().add(pb.AgentLoop(phase=pb.AgentLoopPhase.TURN_COMPLETED,
                                              turn=2)).commit()
        assert writer.record.tape_len == 2
        assert len(store.read_tape(writer.record.run_id, -1, 10).events) == 2
    finally:
        store.close()


async def test_a_refused_append_rolls_memory_back(tmp_path: Path) -> None:
    store = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=True))
    try:
        writer = _writer(store)
        store.close()  # the journal refuses what comes next
        with pytest.raises(Exception):  # noqa: B017 - whatever the closed store raises
            await writer.batch().add(pb.AgentLoop(
                phase=pb.AgentLoopPhase.TURN_COMPLETED, turn=1)).commit()
        assert writer.record.tape_len == 0 and writer.loop.tape_len == 0
    finally:
        store.close()
