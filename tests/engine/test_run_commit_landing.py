"""A run's commit lands or is abandoned by the journal's answer, whatever its caller does.

``Batch.commit_locked`` hands the journal an answer object instead of awaiting a
shielded future: the run's record and loop state must still follow the journal
exactly when the committing task is cancelled while its append is queued.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from palyra_gen.palyra import v1 as pb

from palyra.core.ids import new_ulid
from palyra.engine.model.fold import LoopState
from palyra.engine.model.lifecycle import RunStateId
from palyra.engine.model.records import IdentityRec, RunRecord
from palyra.engine.run.writer import RunWriter
from palyra.journal import JournalStore


def _writer(store: JournalStore) -> RunWriter:
    record = RunRecord(run_id=new_ulid(), session_id=new_ulid(), state=RunStateId.IN_PROGRESS,
                       identity=IdentityRec("user:test"), created_ms=1, updated_ms=1)
    return RunWriter(store, record, LoopState(), lambda: 2)


async def test_a_commit_cancelled_while_queued_still_lands_before_the_cancel_goes_on(
        tmp_path: Path) -> None:
    store = JournalStore.open(tmp_path / "data")
    try:
        writer = _writer(store)
        batch = writer.batch().add(pb.AgentLoop(phase=pb.AgentLoopPhase.STARTED, turn=0),
                                   pb.MessageReplied(reply_text="hello"))
        committing = asyncio.ensure_future(batch.commit())
        await asyncio.sleep(0)  # the append is queued; the task awaits its answer
        assert not committing.done()
        committing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await committing
        # The cancellation went on only after the append settled, and it landed.
        stored = store.read_tape(writer.record.run_id).events
        assert [e.kind for e in stored] == ["tape.agent_loop", "tape.message_replied"]
        assert writer.record.tape_len == writer.loop.tape_len == 2
        assert writer.record.final_text == writer.loop.final_text
        # The next commit continues the same tape.
        await writer.batch().add(pb.AgentLoop(phase=pb.AgentLoopPhase.TERMINATED,
                                              turn=0)).commit()
        assert [e.tape_seq for e in store.read_tape(writer.record.run_id).events] == [0, 1, 2]
        assert writer.record.tape_len == 3
    finally:
        store.close()


async def test_a_commit_answers_its_events_and_moves_the_record_first(tmp_path: Path) -> None:
    store = JournalStore.open(tmp_path / "data")
    try:
        writer = _writer(store)
        seen: list[int] = []
        batch = writer.batch().add(pb.MessageReplied(reply_text="hi"))
        batch.on_landed(lambda: seen.append(writer.record.tape_len))
        events = await batch.commit()
        assert [e.kind for e in events] == ["tape.message_replied"]
        assert seen == [1] and writer.record.tape_len == 1
    finally:
        store.close()
