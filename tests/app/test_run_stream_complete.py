"""``RunStreamRequest.complete``: the run's completion rides its first commit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from palyra_gen.palyra import v1 as pb

from palyra.app import PalyraApp
from palyra.journal import JournalStore
from palyra.testing.apps import STREAM_USER, tool_loop_text

USER = STREAM_USER
TEXT = tool_loop_text(2)


async def _turn(app: PalyraApp, key: str, *, complete: bool,
                half_close: asyncio.Event) -> list[pb.TapeEvent]:
    async def requests() -> AsyncIterator[pb.RunStreamRequest]:
        yield pb.RunStreamRequest(v=1, session_key=key, input=pb.MessageInput(text=TEXT),
                                  batch=True, complete=complete)
        await half_close.wait()  # the request stream stays open until told

    events: list[pb.TapeEvent] = []
    async for response in app.run_stream(USER, requests()):
        events += response.events
    return events


async def test_complete_ends_the_run_without_a_half_close_and_one_commit_sooner(
        app: tuple[PalyraApp, JournalStore]) -> None:
    palyra, store = app
    never = asyncio.Event()
    before = store.stats().commits
    events = await asyncio.wait_for(_turn(palyra, "a", complete=True, half_close=never), 30)
    with_flag = store.stats().commits - before
    assert events[-1].status is not None and events[-1].status.state == pb.RunState.DONE
    assert [e.message_replied.reply_text for e in events if e.message_replied] == ["result=2"]

    # The same turn completed by the half-close instead: one more durable commit.
    closed = asyncio.Event()
    closed.set()
    before = store.stats().commits
    events = await asyncio.wait_for(_turn(palyra, "b", complete=False, half_close=closed), 30)
    by_half_close = store.stats().commits - before
    assert events[-1].status is not None and events[-1].status.state == pb.RunState.DONE
    assert by_half_close == with_flag + 1



async def test_input_after_a_completing_first_message_is_refused_quietly(
        app: tuple[PalyraApp, JournalStore]) -> None:
    """A later input on a run that asked to complete is refused (RUN_TERMINAL), and the
    stream still ends with the run done, as when an input arrives after the half-close."""
    palyra, _ = app

    async def requests() -> AsyncIterator[pb.RunStreamRequest]:
        yield pb.RunStreamRequest(v=1, session_key="d", input=pb.MessageInput(text=TEXT),
                                  batch=True, complete=True)
        yield pb.RunStreamRequest(v=1, input=pb.MessageInput(text="one more"))

    events: list[pb.TapeEvent] = []
    async for response in palyra.run_stream(USER, requests()):
        events += response.events
    assert events[-1].status is not None and events[-1].status.state == pb.RunState.DONE
    assert [e.message_replied.reply_text for e in events if e.message_replied] == ["result=2"]
