"""``submit(answer=)``: the journal answers the caller's own object, on its loop, once."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from palyra.core.errors import AlreadyExists
from palyra.core.ids import new_ulid
from palyra.journal import EventDraft, JournalStore


class _Recorder:
    """An answer that is not a future: records what it was told, and on which thread."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.threads: list[threading.Thread] = []
        self.told = asyncio.get_running_loop().create_future()

    def done(self) -> bool:
        return bool(self.calls)

    def set_result(self, result: Any, /) -> None:
        self._tell("result", result)

    def set_exception(self, exception: BaseException, /) -> None:
        self._tell("exception", exception)

    def _tell(self, how: str, what: Any) -> None:
        self.calls.append((how, what))
        self.threads.append(threading.current_thread())
        if not self.told.done():
            self.told.set_result(None)


async def test_the_callers_answer_gets_the_durable_events_on_its_loop(
        store: JournalStore) -> None:
    answer = _Recorder()
    event_id = new_ulid()
    returned = store.submit([EventDraft(kind="t.one", actor="a", event_id=event_id)],
                            answer=answer)
    assert returned is answer and not answer.calls  # queued, not answered yet
    await asyncio.wait_for(answer.told, 5)
    [(how, events)] = answer.calls
    assert how == "result" and [e.event_id for e in events] == [event_id]
    assert answer.threads == [threading.main_thread()]  # the loop's thread, not the writer's
    # Durable and readable like any append's.
    assert [e.event_id for e in store.read_range(events[0].position - 1, 1)] == [event_id]


async def test_a_refused_commit_is_told_to_the_callers_answer(store: JournalStore) -> None:
    event_id = new_ulid()
    await store.append([EventDraft(kind="t.one", actor="a", event_id=event_id)])
    answer = _Recorder()
    store.submit([EventDraft(kind="t.two", actor="a", event_id=event_id)], answer=answer)
    await asyncio.wait_for(answer.told, 5)
    [(how, error)] = answer.calls
    assert how == "exception" and isinstance(error, AlreadyExists)


async def test_an_answer_already_done_is_left_alone(store: JournalStore) -> None:
    answer = _Recorder()
    answer.calls.append(("cancelled", None))  # done() is true from the start
    answer.told.set_result(None)
    store.submit([EventDraft(kind="t.one", actor="a")], answer=answer)
    await store.append([EventDraft(kind="t.after", actor="a")])  # a later commit: ours is in
    await asyncio.sleep(0.05)  # its answer had every chance to arrive
    assert answer.calls == [("cancelled", None)]
