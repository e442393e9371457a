"""Lone one-event appends, the usual case at one appender, through the one write path.

Each is planned, framed, answered and applied like a batch of 256 (there is no
short path): its frame holds exactly the plan's writes, a taken event id fails
it whether or not LMDB holds the id yet, and followers and entity readers see it
at once. Recovery, power loss and SIGKILL with a lone appender are in
``test_journal_power_loss.py`` and ``test_journal_crash.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from palyra.core.errors import AlreadyExists
from palyra.journal import EntityWrite, JournalStore, verify_store

from .helpers import draft


def _drafts() -> list[Any]:
    # Fixed ids and times: two stores given these write the same bytes.
    out = []
    for i in range(60):
        writes = (EntityWrite("runs", f"r{i % 2}", b"%d" % i),) if i % 3 == 0 else ()
        if i % 7 == 6 or i == 59:
            writes = (EntityWrite("runs", f"r{i % 2}", None),)  # a delete
        out.append(draft(
            i, event_id=f"01J3ABCD{i:018d}", ts_ms=1_700_000_000_000 + i,
            session_id=f"s{i % 3}", run_id=f"r{i % 2}", tape=i % 4 != 1,
            principal="user:p", entity_writes=writes,
            payload={"i": i, "api_key": "sk-secret-value"} if i % 5 == 0 else {"i": i},
        ))  # fmt: skip
    return out


async def _run(root: Path, drafts: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
    async with JournalStore.open(root) as store:
        answers = [(await store.append([d]))[0] for d in drafts[:4]]
        # A read makes LMDB take the first four (a session or tape new: its head
        # read from LMDB); the frames after them reach LMDB together
        # (RecordingTxn.put_all's one-pass grouping).
        store.read_range(0, 1)
        answers += [(await store.append([d]))[0] for d in drafts[4:]]
        durable = store.env.durable
        assert durable is not None
        frames = list(durable.log.frames(0))
        assert verify_store(store).ok
        # Read after LMDB applied the frames (a read waits for it): rows, ids, indexes.
        rows = [store.get_entity("runs", f"r{k}") for k in range(2)]
        indexed = [e for k in range(3) for e in store.read_session(f"s{k}", 0, 1000)]
        indexed += [e for k in range(2) for e in store.read_tape(f"r{k}", -1, 1000).events]
        stored = [store.read_range(0, 1000), rows, store.last_tape_seq("r0"), indexed]
    return answers, frames, stored


async def test_each_lone_frame_is_its_answer_and_the_store_holds_them(tmp_path: Path) -> None:
    answers, frames, stored = await _run(tmp_path / "lone", _drafts())
    assert len(frames) == 60  # one frame per append
    for (_seq, ops), event in zip(frames, answers, strict=True):
        # The frame: the id claim, the record, the session index, the tape index
        # (on a tape), then the entity rows; keyed by the answer's position.
        names = [name for name, _key, _value in ops]
        tape = ["_tape"] if event.tape_seq >= 0 else []
        assert names[: 3 + len(tape)] == ["_event_ids", "_events", "_by_session", *tape]
        assert ops[0][1] == event.event_id.encode()
    assert stored[0] == answers
    assert any(e.redactions for e in answers) and len({e.session_id for e in answers}) == 3
    assert stored[1] == [b"54", None]  # r0 put last at i=54, r1 deleted last (i=59)
    # Every event through its session's index, every tape event through its run's.
    assert len(stored[3]) == len(answers) + sum(e.tape_seq >= 0 for e in answers)


async def test_lone_frames_with_puts_only_reach_lmdb_whole(tmp_path: Path) -> None:
    # No entity delete among them: one putmulti per sub-DB for all the lone frames.
    drafts = [d for d in _drafts() if not any(w.value is None for w in d.entity_writes)]
    answers, _frames, stored = await _run(tmp_path, drafts)
    assert stored[0] == answers
    tape = [e for e in answers if e.tape_seq >= 0]
    assert sorted(stored[3], key=lambda e: e.position) == sorted(
        answers + tape, key=lambda e: e.position)
    assert stored[1] == [b"54", b"57"]
    assert stored[2] == max(e.tape_seq for e in answers if e.run_id == "r0")


async def test_a_lone_append_refuses_a_taken_id_before_and_after_lmdb_holds_it(
    tmp_path: Path,
) -> None:
    async with JournalStore.open(tmp_path) as store:
        [first] = await store.append([draft(0, session_id="s")])
        [second] = await store.append([draft(1, session_id="s")])
        # Answered, not yet in LMDB: the id is taken all the same.
        with pytest.raises(AlreadyExists):
            await store.append([draft(2, session_id="s", event_id=second.event_id)])
        store.read_range(0, 10)  # a reader waits: LMDB commits what was answered
        for taken in (first, second):  # both held by LMDB now
            with pytest.raises(AlreadyExists):
                await store.append([draft(3, session_id="s", event_id=taken.event_id)])
        [third] = await store.append([draft(4, session_id="s")])
        assert third.position == 3 and third.prev_hash == second.hash
        assert verify_store(store).ok


async def test_a_lone_append_hands_events_to_followers_and_entity_rows_to_readers(
    tmp_path: Path,
) -> None:
    async with JournalStore.open(tmp_path) as store:
        await store.append([draft(0, session_id="s", run_id="r", tape=True)])
        follower = store.follow_tape("r", after_seq=0)
        got = []
        for i in range(1, 4):
            [event] = await store.append([draft(
                i, session_id="s", run_id="r", tape=True,
                entity_writes=(EntityWrite("runs", "r", b"v%d" % i),))])  # fmt: skip
            assert store.get_entity("runs", "r") == b"v%d" % i
            got.append(await asyncio.wait_for(anext(follower), 30))
            assert got[-1] == event
        assert [e.tape_seq for e in got] == [1, 2, 3]
        # In memory, before the answer: once append returns, the event is in the
        # subscription's buffer (no store read needed to see it).
        sub = store._hub.subscribe("r")
        [event] = await store.append([draft(9, session_id="s", run_id="r", tape=True)])
        assert sub.buffered_bytes > 0 and sub.take() == event
        store._hub.unsubscribe(sub)
