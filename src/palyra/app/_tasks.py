"""TasksService: list, read and cancel background tasks (operators only).

The queue is the daemon's (``daemon.wiring`` starts it and its workers); an app
built without one (tests, tools) opens its own over the same journal on first
use.
"""

from __future__ import annotations

from palyra_gen.lifecycle.background_task import PROTO_TO_STATE, STATE_TO_PROTO
from palyra_gen.palyra import v1 as pb

from palyra.app._access import require_operator
from palyra.app._base import AppBase
from palyra.app.context import CallContext
from palyra.core.errors import InvalidArgument
from palyra.tasks import TaskQueue, TaskRecord

MAX_PAGE = 500


def task_proto(rec: TaskRecord) -> pb.BackgroundTask:
    """The wire form of a task."""
    return pb.BackgroundTask(
        task_id=rec.task_id, kind=rec.kind, state=STATE_TO_PROTO[rec.state],  # type: ignore[index]
        payload_json=rec.payload_json, priority=rec.priority,
        not_before_unix_ms=rec.not_before_ms, expires_at_unix_ms=rec.expires_at_ms,
        attempts=rec.attempts, max_attempts=rec.max_attempts, parent_run_id=rec.parent_run_id,
        idempotency_key=rec.idempotency_key,
        lease=pb.TaskLease(owner=rec.lease_owner, epoch=rec.lease_epoch,
                           expires_at_unix_ms=rec.lease_expires_ms) if rec.lease_epoch else None,
        last_error=rec.last_error, result_json=rec.result_json,
        created_at_unix_ms=rec.created_ms, updated_at_unix_ms=rec.updated_ms,
        heartbeat_at_unix_ms=rec.heartbeat_ms, cancel_reason=rec.cancel_reason,
        debounce_key=rec.debounce_key, batch_count=rec.batch_count)


class TasksApi(AppBase):
    """The TasksService group."""

    tasks: TaskQueue | None = None

    async def _task_queue(self) -> TaskQueue:
        """The daemon's queue, or one opened (and recovered) on first use."""
        if self.tasks is None:
            queue = TaskQueue(self.store)
            await queue.start()
            self.tasks = queue
        return self.tasks

    async def list_tasks(self, ctx: CallContext,
                         request: pb.ListTasksRequest) -> pb.ListTasksResponse:
        """Newest first; filters by state, kind and parent run."""
        require_operator(ctx, "listing tasks")
        queue = await self._task_queue()
        state = ""
        if request.state != pb.BackgroundTaskState.UNSPECIFIED:
            state = str(PROTO_TO_STATE[request.state])
        limit = 100 if request.limit == 0 else max(1, min(request.limit, MAX_PAGE))
        page, after = queue.page(state=state, kind=request.kind,
                                 parent_run_id=request.parent_run_id,
                                 after_task_id=request.after_task_id, limit=limit)
        return pb.ListTasksResponse(tasks=[task_proto(r) for r in page], next_after_task_id=after)

    async def get_task(self, ctx: CallContext, request: pb.GetTaskRequest) -> pb.GetTaskResponse:
        """One task."""
        require_operator(ctx, "reading tasks")
        if not request.task_id:
            raise InvalidArgument("task_id is required")
        return pb.GetTaskResponse(task=task_proto((await self._task_queue()).require(
            request.task_id)))

    async def cancel_task(self, ctx: CallContext,
                          request: pb.CancelTaskRequest) -> pb.CancelTaskResponse:
        """Cancel now, or at the running worker's next heartbeat."""
        identity = require_operator(ctx, "cancelling tasks")
        if not request.task_id:
            raise InvalidArgument("task_id is required")
        reason = request.reason or f"cancelled by {identity.principal}"
        rec = await (await self._task_queue()).cancel(request.task_id, reason)
        return pb.CancelTaskResponse(task=task_proto(rec))
