"""RunStream follows the run it starts from memory: subscribed before the run's first
commit, it never reads the tape back from the store; a run id that is taken still fails."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from palyra_gen.palyra import v1 as pb

from palyra.app import PalyraApp
from palyra.core.errors import ErrorCode, PalyraError
from palyra.core.ids import new_ulid
from palyra.journal import JournalStore
from palyra.testing.apps import STREAM_USER, tool_loop_text

USER = STREAM_USER
TEXT = tool_loop_text(3)


async def _turn(app: PalyraApp, key: str, run_id: str = "") -> list[pb.TapeEvent]:
    async def requests() -> AsyncIterator[pb.RunStreamRequest]:
        yield pb.RunStreamRequest(v=1, session_key=key, input=pb.MessageInput(text=TEXT),
                                  batch=True, complete=True, run_id=run_id)

    events: list[pb.TapeEvent] = []
    async for response in app.run_stream(USER, requests()):
        events += response.events
    return events


async def test_the_stream_never_reads_its_runs_tape_back(
        app: tuple[PalyraApp, JournalStore], monkeypatch: pytest.MonkeyPatch) -> None:
    palyra, store = app
    reads: list[str] = []
    read_tape = store.read_tape

    def counted(run_id: str, after_seq: int = -1, limit: int = 100) -> object:
        reads.append(run_id)
        return read_tape(run_id, after_seq, limit)

    monkeypatch.setattr(store, "read_tape", counted)
    for key, run_id in (("a", ""), ("b", new_ulid())):  # minted here, or by the client
        events = await _turn(palyra, key, run_id)
        assert [e.tape_seq for e in events] == list(range(len(events)))  # whole, in order
        assert events[-1].status is not None and events[-1].status.state == pb.RunState.DONE
        assert [e.message_replied.reply_text for e in events if e.message_replied] == [
            "result=3"]
        assert not run_id or events[0].run_id == run_id
    assert reads == []
    assert not store._hub._by_run  # every subscription given back


async def test_a_taken_run_id_fails_and_leaves_no_subscription(
        app: tuple[PalyraApp, JournalStore]) -> None:
    palyra, store = app
    events = await _turn(palyra, "a")
    taken = events[0].run_id
    with pytest.raises(PalyraError) as clash:
        await _turn(palyra, "b", taken)
    assert clash.value.code is ErrorCode.ALREADY_EXISTS
    with pytest.raises(PalyraError) as bad:
        await _turn(palyra, "c", "not-a-ulid")
    assert bad.value.code is ErrorCode.INVALID_ARGUMENT
    assert not store._hub._by_run


async def test_a_turn_that_completes_with_its_first_message_reads_no_run_row_after_it_starts(
        app: tuple[PalyraApp, JournalStore], monkeypatch: pytest.MonkeyPatch) -> None:
    # Such a read waits, on the event loop, for LMDB to apply the run's first commit.
    palyra, store = app
    started: list[str] = []
    late_reads: list[str] = []
    get_entity = store.get_entity

    def counted(table: str, key: str) -> bytes | None:
        if started and key == started[0]:
            late_reads.append(f"{table}/{key}")
        return get_entity(table, key)

    monkeypatch.setattr(store, "get_entity", counted)

    async def requests() -> AsyncIterator[pb.RunStreamRequest]:
        yield pb.RunStreamRequest(v=1, session_key="c", input=pb.MessageInput(text=TEXT),
                                  batch=True, complete=True)

    events: list[pb.TapeEvent] = []
    async for response in palyra.run_stream(USER, requests()):
        if not started:
            started.append(response.events[0].run_id)
        events += response.events
    assert events[-1].status is not None and events[-1].status.state == pb.RunState.DONE
    assert late_reads == []
