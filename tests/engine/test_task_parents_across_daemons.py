"""A run's end and its tasks with two engines on one real PostgreSQL journal.

On a shared journal a run's end commits alone and its daemon cancels the run's tasks
afterwards, each by its own compare-and-set (``TaskQueue.cancelling_children``): a
task another daemon finished in the same instant stays finished. Where the run's
daemon never does (one killed between the two commits), the other daemon's run-end
follower sees the run's end through its watcher and cancels the tasks.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_harness import USER, Harness, loop_text, slow_add
from lease_daemons import pg_daemon, until
from palyra_gen.palyra import v1 as pb

from palyra.core.errors import ErrorCode, PalyraError
from palyra.daemon.run_ends import RunEndFollower
from palyra.engine.model.records import RUNS
from palyra.journal.postgres.store import PostgresJournalStore
from palyra.tasks import State, TaskQueue
from palyra.tasks.model import decode
from palyra.tasks.parent import run_ended


async def test_another_daemon_cancels_the_tasks_of_a_run_that_ended_elsewhere(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a = pg_daemon(daemons, tmp_path, dsn, ttl_s=60)
    a.tool = slow_add(300)
    app_a = await a.start()
    b = pg_daemon(daemons, tmp_path, dsn, ttl_s=60)
    await b.start()
    assert b.store is not None and b.engine is not None
    queue = TaskQueue(b.store)
    await queue.start()
    follower = RunEndFollower(b.store, b.engine, queue, grace_s=0.2)
    try:
        created = await app_a.create_run(USER, pb.CreateRunRequest(
            v=1, session_key="p", input=pb.MessageInput(text=loop_text(2)), complete=True))
        assert created.run is not None
        run_id = created.run.run_id
        child, _ = await queue.enqueue("k", parent_run_id=run_id)
        bystander, _ = await queue.enqueue("k", parent_run_id="01J00000000000000000000000")
        await app_a.abort_run(USER, pb.AbortRunRequest(run_id=run_id, reason="stop"))
        await until(lambda: queue.require(child.task_id).state == State.CANCELLED, 10)
        assert queue.require(child.task_id).cancel_reason.startswith(
            f"parent run {run_id} ended")
        assert queue.require(bystander.task_id).state == State.QUEUED
    finally:
        follower.close()
        await queue.close()


async def test_a_run_end_leaves_finished_the_task_another_daemon_just_finished(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a = pg_daemon(daemons, tmp_path, dsn, ttl_s=60)
    a.tool = slow_add(300)
    app_a = await a.start()
    b = pg_daemon(daemons, tmp_path, dsn, ttl_s=60)
    await b.start()
    assert isinstance(a.store, PostgresJournalStore) and a.engine is not None
    assert b.store is not None
    qa, qb = TaskQueue(a.store), TaskQueue(b.store)
    await qa.start()
    await qb.start()
    a.engine.on_run_terminal(lambda record, event: qa.cancelling_children(
        record.run_id, f"parent run {record.run_id} ended ({event})"))
    try:
        created = await app_a.create_run(USER, pb.CreateRunRequest(
            v=1, session_key="p", input=pb.MessageInput(text=loop_text(2)), complete=True))
        assert created.run is not None
        run_id = created.run.run_id
        child, _ = await qa.enqueue("k", parent_run_id=run_id)
        await until(lambda: child.task_id in {r.task_id for r in qb.unfinished()})
        assert a.store._watch is not None
        a.store._watch.stop()  # A has not heard of B's work on the task when its run ends
        taken = await qb.claim("b-worker", frozenset({"k"}))
        await qb.succeed(taken.task_id, taken.lease_epoch)
        await app_a.abort_run(USER, pb.AbortRunRequest(run_id=run_id, reason="stop"))
        await until(lambda: a.engine is not None
                    and a.engine.get_run(USER.identity, run_id).state == "cancelled", 10)
        await until(lambda: (r := qa.get(child.task_id)) is not None and r.final, 10)
        row = b.store.get_entity("tasks", "id:" + child.task_id, fresh=True)
        assert row is not None and decode(row).state == State.SUCCEEDED
        assert not [e for e in b.store.read_range(0, 100_000) if e.kind == "task.cancelled"]
    finally:
        await qa.close()
        await qb.close()


async def test_a_task_enqueued_as_its_parent_run_ends_elsewhere_is_refused(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    a = pg_daemon(daemons, tmp_path, dsn, ttl_s=60)
    a.tool = slow_add(300)
    app_a = await a.start()
    b = pg_daemon(daemons, tmp_path, dsn, ttl_s=60)
    await b.start()
    assert a.engine is not None and isinstance(b.store, PostgresJournalStore)
    queue = TaskQueue(b.store)
    await queue.start()
    try:
        created = await app_a.create_run(USER, pb.CreateRunRequest(
            v=1, session_key="p", input=pb.MessageInput(text=loop_text(2)), complete=True))
        assert created.run is not None
        run_id = created.run.run_id
        await until(lambda: b.store is not None and b.store.get_entity(RUNS, run_id) is not None)
        assert b.store._watch is not None
        b.store._watch.stop()  # B still reads the run as running: its end has not reached B
        seen = b.store.get_entity(RUNS, run_id)
        assert seen is not None and not run_ended(seen)
        await app_a.abort_run(USER, pb.AbortRunRequest(run_id=run_id, reason="stop"))
        await until(lambda: a.engine is not None
                    and a.engine.get_run(USER.identity, run_id).state == "cancelled", 10)
        with pytest.raises(PalyraError) as refused:
            await queue.enqueue("k", parent_run_id=run_id)
        assert refused.value.code is ErrorCode.RUN_TERMINAL
        assert queue.unfinished() == []
        assert not [e for e in b.store.read_range(0, 100_000) if e.kind == "task.enqueued"]
    finally:
        await queue.close()
