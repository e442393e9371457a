"""The tasks of a run that ended on another daemon are cancelled even when that daemon
stopped right after its run's end (two engines on one real PostgreSQL journal).

On a shared journal a run's end commits alone and its daemon cancels the run's tasks
afterwards (``TaskQueue.cancelling_children``). Here the run's daemon never does (it
stands for one killed between the two commits): the other daemon's run-end follower
sees the run's end through its watcher and cancels the tasks.
"""

from __future__ import annotations

from pathlib import Path

from engine_harness import USER, Harness, loop_text, slow_add
from lease_daemons import pg_daemon, until
from palyra_gen.palyra import v1 as pb

from palyra.daemon.run_ends import RunEndFollower
from palyra.tasks import State, TaskQueue


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
