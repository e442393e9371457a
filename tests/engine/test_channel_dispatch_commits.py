"""A message costs four appends: its admission, its run's start, its run's end carrying
the dispatch's success (with the reply's send task born claimed by the outbox), and the
send's success. The dispatch's success is not an append of its own."""

from __future__ import annotations

import asyncio
from typing import Any

from engine_harness import Harness

from palyra.channels import (
    DISPATCH_TASK,
    SEND_TASK,
    ChannelRouter,
    ChannelsConfig,
    Envelope,
    PairingBook,
)
from palyra.channels.config import ChannelPolicy
from palyra.policy import PolicyGate
from palyra.tasks import TaskQueue, TaskRecord
from palyra.tasks.worker import TaskContext, TaskWorker


async def test_a_dispatch_succeeds_in_its_runs_last_commit(harness: Harness) -> None:
    sent, dispatch, appends = await _answer_one(harness, "hello there")
    store = harness.store
    assert store is not None
    assert [c[1] for p in sent for c in p["chunks"]] == ["hello there"]
    assert dispatch.final and '"outputs":["hello there"]' in dispatch.result_json
    assert appends == 4  # five before the fold
    # The success is in the commit that ended the run: it follows the terminal status
    # with nothing of another append between them.
    events = store.read_range(0, 1000)
    ended = next(e.position for e in events
                 if e.run_id == dispatch.task_id and e.kind == "tape.status"
                 and e.payload.get("state") == "RUN_STATE_DONE")
    succeeded = next(e.position for e in events if e.kind == "task.succeeded"
                     and e.payload["task_id"] == dispatch.task_id)
    assert succeeded > ended
    assert all(e.run_id == dispatch.task_id or e.kind.startswith("task.")
               for e in events if ended < e.position < succeeded)


async def test_a_reply_riding_in_the_runs_end_is_sent_as_the_journal_keeps_it(
        harness: Harness) -> None:
    # The scripted model echoes the message, secret and all: the reply the dispatch
    # stages in the run's last commit is the journal's redacted text, never the raw one.
    secret = "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB"
    sent, dispatch, appends = await _answer_one(harness, f"token {secret} here")
    assert appends == 4  # it did ride in the run's end
    assert [c[1] for p in sent for c in p["chunks"]] == ["token <redacted> here"]
    assert secret not in dispatch.result_json
    store = harness.store
    assert store is not None
    assert [e.payload["replyText"] for e in store.read_range(0, 1000)
            if e.kind == "tape.message_replied"] == ["token <redacted> here"]


async def _answer_one(harness: Harness, text: str) -> tuple[list[dict[str, Any]], TaskRecord, int]:
    """One webhook message answered through the router and real task workers: the sends'
    payloads, the dispatch task as it ended, and the appends the message took."""
    await harness.start()
    store, engine = harness.store, harness.engine
    assert store is not None and engine is not None
    tasks = TaskQueue(store)
    await tasks.start()
    config = ChannelsConfig(default=ChannelPolicy(dm_policy="allow", mentions=("*",)))
    router = ChannelRouter(store, engine, tasks, PairingBook(store), PolicyGate.load(), config)
    sent: list[dict[str, Any]] = []
    replied = asyncio.Event()

    async def send(ctx: TaskContext) -> dict[str, Any]:
        sent.append(ctx.payload)
        replied.set()
        return {}

    sender = TaskWorker(tasks, {SEND_TASK: send}, concurrency=2)
    dispatcher = TaskWorker(tasks, {DISPATCH_TASK: router.dispatch}, concurrency=2,
                            hand_to={SEND_TASK: sender}, staging={DISPATCH_TASK})
    router.hand_dispatches_to(dispatcher)
    sender.start()
    dispatcher.start()
    try:
        before = store.stats().append_calls
        admitted = await router.admit(Envelope(
            envelope_id="", channel="webhook:hooks", conversation_id="room", sender="alice",
            text=text, sender_verified=True, mentions_agent=True), sink="webhook:x")
        async with asyncio.timeout(10):
            await replied.wait()
            while not all(t.final for t in tasks.page(kind=SEND_TASK)[0]):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        return sent, tasks.require(admitted.task_id), store.stats().append_calls - before
    finally:
        await dispatcher.close()
        await sender.close()
        await tasks.close()
