"""A message that arrives while its conversation's run is going joins that run as input;
a dispatch claimed again (after a crash) while its own run is going only waits on it.

The router starts its runs half-closed (they end once idle), and still gives them the
messages that arrive before that end. The run of a dispatch has the task's id, so the
router tells its own run (never given its messages twice) from another dispatch's.
"""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from engine_harness import Harness, loop_text, slow_add
from palyra_gen.palyra import v1 as pb

from palyra.channels import ChannelRouter, ChannelsConfig, Envelope, PairingBook
from palyra.channels.config import ChannelPolicy
from palyra.policy import PolicyGate
from palyra.tasks import Done, TaskQueue
from palyra.tasks.worker import TaskContext, TaskWorker


async def _router(harness: Harness) -> tuple[TaskQueue, ChannelRouter]:
    harness.tool = slow_add(0.2)
    await harness.start()
    assert harness.store is not None and harness.engine is not None
    tasks = TaskQueue(harness.store)
    await tasks.start()
    config = ChannelsConfig(default=ChannelPolicy(dm_policy="allow", mentions=("*",)))
    return tasks, ChannelRouter(harness.store, harness.engine, tasks,
                                PairingBook(harness.store), PolicyGate.load(), config)


async def _dispatch(router: ChannelRouter, tasks: TaskQueue, text: str
                    ) -> tuple[TaskContext, asyncio.Future[Done]]:
    admitted = await router.admit(Envelope(
        envelope_id="", channel="webhook:hooks", conversation_id="room", sender="alice",
        text=text, sender_verified=True, mentions_agent=True))
    ctx = TaskContext(tasks.require(admitted.task_id), {"envelope_id": admitted.envelope_id})
    return ctx, asyncio.ensure_future(router.dispatch(ctx))


async def _running(harness: Harness, run_id: str) -> None:
    assert harness.engine is not None
    async with asyncio.timeout(5):
        while True:
            if harness.engine.phase_of(run_id) is not None:
                return
            await asyncio.sleep(0.01)


async def test_a_message_joins_its_conversations_running_run(harness: Harness) -> None:
    tasks, router = await _router(harness)
    try:
        ctx, first = await _dispatch(router, tasks, loop_text(3))
        await _running(harness, ctx.task.task_id)  # a slow tool call is under way
        _ctx2, second = await _dispatch(router, tasks, "and what is 2 + 2?")
        joined = (await second).result or {}
        done = (await first).result or {}
        assert joined["delivered_to_active_run"] and joined["run_id"] == ctx.task.task_id
        inputs = [m.text for m in harness.members(ctx.task.task_id)
                  if isinstance(m, pb.UserInput)]
        assert inputs == [loop_text(3), "and what is 2 + 2?"]
        # The run answers both; its replies go out with the first dispatch.
        assert len(done["outputs"]) == 2  # type: ignore[arg-type]
        assert len([t for t in tasks.page(kind="channel.dispatch")[0]]) == 2
    finally:
        await tasks.close()


async def test_a_repeated_dispatch_waits_on_its_own_run(harness: Harness) -> None:
    tasks, router = await _router(harness)
    try:
        ctx, first = await _dispatch(router, tasks, loop_text(3))
        task = ctx.task
        # The run is under way: the same task is dispatched again, as a worker
        # claiming it after a restart would.
        await _running(harness, task.task_id)
        again = (await router.dispatch(ctx)).result or {}
        done = (await first).result or {}
        assert again["run_id"] == done["run_id"] == task.task_id
        assert not again["delivered_to_active_run"]
        inputs = [m for m in harness.members(task.task_id) if isinstance(m, pb.UserInput)]
        assert len(inputs) == 1, [i.text for i in inputs]
        assert again["outputs"] == done["outputs"] and done["outputs"]
    finally:
        await tasks.close()


async def test_a_first_attempt_starts_its_run_without_reading_the_store_for_it(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dispatch's first attempt starts its run without asking the store whether a run
    of that id exists (none can: the run's id is the task's, and only an earlier attempt
    could have started it); that read, on the loop's thread, hands the GIL to the
    journal's writer. A later attempt still asks, and only waits on the run it finds."""
    tasks, router = await _router(harness)
    assert harness.store is not None
    runs_read: list[str] = []  # reads of a run's row before the run existed
    real_get = harness.store.get_entity

    def counting(table: str, key: str) -> bytes | None:
        value = real_get(table, key)
        if table == "runs" and value is None:
            runs_read.append(key)
        return value

    monkeypatch.setattr(harness.store, "get_entity", counting)
    try:
        admitted = await router.admit(Envelope(
            envelope_id="", channel="webhook:hooks", conversation_id="room", sender="alice",
            text="hello", sender_verified=True, mentions_agent=True))
        claimed = await tasks.claim("worker:test", frozenset({"channel.dispatch"}))
        assert claimed.task_id == admitted.task_id and claimed.attempts == 1
        ctx = TaskContext(claimed, {"envelope_id": admitted.envelope_id})
        done = (await router.dispatch(ctx)).result or {}
        assert done["run_id"] == claimed.task_id and done["outputs"]
        assert claimed.task_id not in runs_read
        # A second attempt (after a crash) finds the run the first one started.
        again = TaskContext(msgspec.structs.replace(claimed, attempts=2), ctx.payload)
        repeated = (await router.dispatch(again)).result or {}
        assert repeated["run_id"] == claimed.task_id
        inputs = [m for m in harness.members(claimed.task_id) if isinstance(m, pb.UserInput)]
        assert len(inputs) == 1
    finally:
        await tasks.close()


async def test_a_message_is_admitted_with_its_dispatch_claimed_and_handed_over(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """The admission's one commit holds the message, its dispatch task and that task's
    claim by the dispatch worker, which runs it at once: no claim commit of its own and
    no wake-up of the worker's loops. Its first attempt queues its replies without
    looking their keys up in the store (no earlier attempt can have queued them)."""
    tasks, router = await _router(harness)
    assert harness.store is not None
    worker = TaskWorker(tasks, {"channel.dispatch": router.dispatch}, concurrency=2,
                        staging={"channel.dispatch"})
    router.hand_dispatches_to(worker)
    worker.start()
    idem_reads: list[str] = []
    real_get = harness.store.get_entity

    def counting(table: str, key: str) -> bytes | None:
        if table == "tasks" and key.startswith("idem:"):
            idem_reads.append(key)
        return real_get(table, key)

    monkeypatch.setattr(harness.store, "get_entity", counting)
    try:
        commits = tasks.commits
        admitted = await router.admit(Envelope(
            envelope_id="", channel="webhook:hooks", conversation_id="room", sender="alice",
            text="hello", sender_verified=True, mentions_agent=True), sink="webhook:hooks")
        assert tasks.commits == commits + 1
        task = tasks.require(admitted.task_id)
        assert task.leased and task.lease_owner == worker.owner and task.attempts == 1
        events = [e for e in harness.store.read_range(0, 1000)
                  if e.payload.get("task_id") == admitted.task_id]
        # Born claimed: one task event, already running under the worker.
        assert [e.kind for e in events[:2]] == ["channel.message_admitted", "task.enqueued"]
        assert events[1].payload["state"] == "running"
        outcome = await router.outcome(admitted.task_id, 10.0)
        assert outcome is not None and outcome.outputs and outcome.run_id == admitted.task_id
        async with asyncio.timeout(5):
            while True:
                if tasks.require(admitted.task_id).final:
                    break
                await asyncio.sleep(0.01)
        assert tasks.require(admitted.task_id).attempts == 1
        sends = tasks.page(kind="channel.send")[0]
        assert [t.idempotency_key for t in sends] == [f"reply:{admitted.task_id}:0"]
        assert idem_reads == []
    finally:
        await worker.close()
        await tasks.close()


async def test_dispatches_to_many_channel_names_leave_no_slot_behind(harness: Harness) -> None:
    """An operator may route to any channel name; each name's concurrency slot lives
    only while a dispatch holds or waits for it, not for the daemon's life."""
    tasks, router = await _router(harness)
    try:
        for i in range(12):
            admitted = await router.admit(Envelope(
                envelope_id="", channel=f"webhook:name-{i}", conversation_id="room",
                sender="alice", text="hello", sender_verified=True, mentions_agent=True))
            ctx = TaskContext(tasks.require(admitted.task_id),
                              {"envelope_id": admitted.envelope_id})
            assert ((await router.dispatch(ctx)).result or {})["outputs"]
        assert len(router._dispatcher._slots) == 0
    finally:
        await tasks.close()
