"""Answer rows of hand-overs whose askers stopped waiting are deleted by the sweep.

Two engines on one real PostgreSQL journal: a session change handed to a dead owner
waits; its asker gives up (as its ``UNAVAILABLE`` timeout does); the session's next
owner applies the change and writes the answer row, which nobody reads. The sweep
deletes it once it has seen it for longer than any asker waits, and not before.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from engine_harness import USER, Harness
from lease_daemons import expire, started, until
from palyra_gen.palyra import v1 as pb

from palyra.engine.run.answer_sweep import AnswerSweep, overdue
from palyra.engine.run.inbox import RelayedMessage, answer, answer_key
from palyra.journal import EntityWrite, EventDraft
from palyra.journal.postgres.store import PostgresJournalStore

KEEP_S = 10.0


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_timed_out_change_answer_is_deleted_once_no_asker_can_wait_for_it(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    assert isinstance(a.store, PostgresJournalStore)
    store = a.store
    sid = (await app_a.resolve_session(USER, pb.ResolveSessionRequest(
        session_key="busy"))).session.session_id
    assert store.acquire_lease("session:" + sid, "gone/1/x", 60) is not None  # a dead owner
    asking = asyncio.create_task(app_a.set_tool_posture(USER, pb.SetToolPostureRequest(
        session_id=sid, tool_name="add", posture=pb.ToolPosture.DISABLED)))
    await until(lambda: store.scan_entities("meta", "session_change:", "", 10) != [])
    asking.cancel()  # the asker stops waiting (its timeout)
    with contextlib.suppress(asyncio.CancelledError):
        await asking
    expire(dsn, sid)  # the dead owner's term runs out: A applies the change and answers
    await until(lambda: store.scan_entities("meta", "session_answer:", "", 10) != [])
    [(key, _raw)] = store.scan_entities("meta", "session_answer:", "", 10)
    # An input's answer too, written as an owner writes it, with a row that is no answer.
    await store.append([EventDraft(kind="test.rows", actor="test", entity_writes=(
        *answer(RelayedMessage(input_id="in-1", text="hi")),
        EntityWrite("meta", "session_change:other", b"{}")))])
    clock = Clock()
    sweep = AnswerSweep(store, KEEP_S, every_s=5.0, clock=clock)
    assert await sweep.maybe() == []  # first seen now: their askers may still wait
    clock.now += 4.0
    assert await sweep.maybe() == []  # within every_s of the last sweep: not swept
    clock.now += 1.0
    assert await sweep.maybe() == []  # swept: seen for 5 s, less than any asker waits
    assert len(store.scan_entities("meta", "session_answer:", "", 10)) == 1
    clock.now += KEEP_S - 5.0
    assert sorted(await sweep.maybe()) == sorted([key, answer_key("in-1")])
    assert store.scan_entities("meta", "session_answer:", "", 10) == []
    assert store.scan_entities("meta", "run_answer:", "", 10) == []
    assert [k for k, _ in store.scan_entities("meta", "session_change:", "", 10)] == [
        "session_change:other"]  # not an answer: left alone


def test_a_row_is_due_only_once_seen_for_the_whole_wait() -> None:
    kept, due = overdue({}, ["x", "y"], 0.0, 10.0)
    assert (kept, due) == ({"x": 0.0, "y": 0.0}, [])
    kept, due = overdue(kept, ["y", "z"], 9.9, 10.0)  # x went (its asker deleted it)
    assert (kept, due) == ({"y": 0.0, "z": 9.9}, [])
    kept, due = overdue(kept, ["y", "z"], 10.0, 10.0)
    assert (kept, due) == ({"z": 9.9}, ["y"])
