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
from palyra.tasks import TaskQueue
from palyra.tasks.worker import TaskContext, TaskWorker


async def test_a_dispatch_succeeds_in_its_runs_last_commit(harness: Harness) -> None:
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
            text="hello there", sender_verified=True, mentions_agent=True), sink="webhook:x")
        async with asyncio.timeout(10):
            await replied.wait()
            while not all(t.final for t in tasks.page(kind=SEND_TASK)[0]):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        assert [c[1] for p in sent for c in p["chunks"]] == ["hello there"]
        dispatch = tasks.require(admitted.task_id)
        assert dispatch.final and '"outputs":["hello there"]' in dispatch.result_json
        assert store.stats().append_calls - before == 4  # five before the fold
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
    finally:
        await dispatcher.close()
        await sender.close()
        await tasks.close()
