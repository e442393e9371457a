"""TasksService against a real daemon: tasks queued before a start are recovered, listed,
read and cancelled over HTTP and gRPC, by operators only; a task leased by a dead process
is re-queued by recovery, never left running."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
from grpclib.client import Channel
from palyra_gen.palyra import v1

from palyra.journal import JournalStore
from palyra.tasks import TaskQueue
from palyra.testing.spawn import DaemonProcess, clean_env

pytestmark = pytest.mark.slow
DEVICE = "01J00000000000000000000000"


async def _seed(data_dir: Path) -> tuple[str, str]:
    """A queued task and one a worker held when its process died."""
    store = JournalStore.open(data_dir)
    queue = TaskQueue(store)
    await queue.start()
    waiting, _ = await queue.enqueue("reflect", payload={"run": "r1"}, priority=2)
    held, _ = await queue.enqueue("reflect", payload={"run": "r2"}, priority=9)
    await queue.claim("worker:gone")
    await queue.close()
    store.close()
    return waiting.task_id, held.task_id


def test_tasks_over_http_and_grpc(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    waiting, held = asyncio.run(_seed(data_dir))
    with DaemonProcess(data_dir, env=clean_env()) as daemon:
        base = f"http://127.0.0.1:{daemon.http_port}"
        admin = {"authorization": f"Bearer {daemon.token}", "x-palyra-device-id": DEVICE,
                 "x-palyra-principal": "admin:ops"}
        listed = httpx.get(f"{base}/v1/tasks", headers=admin)
        assert listed.status_code == 200, listed.text
        tasks = {t["taskId"]: t for t in listed.json()["tasks"]}
        assert set(tasks) == {waiting, held}
        # Recovery re-queued the dead worker's task and counted its attempt.
        assert tasks[held]["state"] == "BACKGROUND_TASK_STATE_QUEUED"
        assert tasks[held]["attempts"] == 1 and tasks[held]["lease"]["owner"] == "worker:gone"
        only = httpx.get(f"{base}/v1/tasks", headers=admin,
                         params={"state": "BACKGROUND_TASK_STATE_QUEUED", "kind": "nope"})
        assert only.json().get("tasks", []) == []
        user = {**admin, "x-palyra-principal": "user:alice"}
        denied = httpx.get(f"{base}/v1/tasks", headers=user)
        assert denied.status_code == 403 and denied.json()["code"] == "PERMISSION_DENIED"
        missing = httpx.get(f"{base}/v1/tasks/01J00000000000000000000009", headers=admin)
        assert missing.status_code == 404 and missing.json()["code"] == "NOT_FOUND"
        cancelled = httpx.post(f"{base}/v1/tasks/{waiting}:cancel", headers=admin,
                               json={"reason": "not needed"})
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["task"]["state"] == "BACKGROUND_TASK_STATE_CANCELLED"

        async def over_grpc() -> v1.BackgroundTask:
            channel = Channel("127.0.0.1", daemon.grpc_port)
            try:
                stub = v1.TasksServiceStub(channel, metadata={
                    "authorization": f"Bearer {daemon.token}",
                    "x-palyra-principal": "admin:ops", "x-palyra-device-id": DEVICE})
                got = await stub.get_task(v1.GetTaskRequest(task_id=waiting))
                assert got.task is not None
                return got.task
            finally:
                channel.close()

        task = asyncio.run(over_grpc())
        assert task.state == v1.BackgroundTaskState.CANCELLED
        assert task.cancel_reason == "not needed"


def test_a_finished_run_is_reflected_on_by_the_daemon(tmp_path: Path) -> None:
    """Wiring: run end -> post_run_reflection task -> worker -> candidates, reviewable."""
    with DaemonProcess(tmp_path / "data", env=clean_env()) as daemon:
        base = f"http://127.0.0.1:{daemon.http_port}"
        user = {"authorization": f"Bearer {daemon.token}", "x-palyra-device-id": DEVICE,
                "x-palyra-principal": "user:alice"}
        run = httpx.post(f"{base}/v1/runs", headers=user, json={
            "input": {"text": "Remember that the office is in Brno. Start from 0 and add 1 "
                              "to the running total 2 times, then reply."},
            "complete": True, "wait": True})
        assert run.status_code == 200, run.text
        run_id = run.json()["run"]["runId"]
        found: list[dict[str, object]] = []
        for _ in range(200):
            got = httpx.get(f"{base}/v1/learning/candidates", headers=user,
                            params={"run_id": run_id})
            found = got.json().get("candidates", [])
            if found:
                break
            time.sleep(0.05)
        fact = next(c for c in found if c["kind"] == "durable_fact")
        assert fact["text"] == "the office is in Brno"
        assert fact["state"] == "LEARNING_CANDIDATE_STATE_APPLIED" and fact["memoryId"]
        admin = {**user, "x-palyra-principal": "admin:ops"}
        tasks = httpx.get(f"{base}/v1/tasks", headers=admin,
                          params={"kind": "post_run_reflection"}).json()["tasks"]
        assert [t["state"] for t in tasks] == ["BACKGROUND_TASK_STATE_SUCCEEDED"]
