"""``palyra tasks list | show | cancel``: background tasks (operators)."""

from __future__ import annotations

import argparse

from palyra_gen.palyra import v1

from palyra.cli._client import Stubs
from palyra.cli._command import Shown, SubParsers, add_command, add_group
from palyra.cli._render import enum_name, format_ms

_STATES = {enum_name(s): s for s in v1.BackgroundTaskState if s.value}


def _row(t: v1.BackgroundTask) -> list[str]:
    return [t.task_id, t.kind, enum_name(t.state), f"{t.attempts}/{t.max_attempts}",
            t.parent_run_id or "-", format_ms(t.updated_at_unix_ms)]


def _lease(lease: v1.TaskLease | None) -> str:
    if lease is None or not lease.owner:
        return "-"
    return f"{lease.owner} epoch {lease.epoch}, until {format_ms(lease.expires_at_unix_ms)}"


def _task_lines(t: v1.BackgroundTask) -> str:
    return "\n".join([
        f"task           {t.task_id}", f"kind           {t.kind}",
        f"state          {enum_name(t.state)}",
        f"attempts       {t.attempts}/{t.max_attempts}",
        f"parent run     {t.parent_run_id or '-'}",
        f"lease          {_lease(t.lease)}",
        f"not before     {format_ms(t.not_before_unix_ms)}",
        f"last error     {t.last_error or '-'}", f"cancel reason  {t.cancel_reason or '-'}",
        f"payload        {t.payload_json or '-'}", f"result         {t.result_json or '-'}",
        f"updated        {format_ms(t.updated_at_unix_ms)}"])


async def _list(stubs: Stubs, args: argparse.Namespace) -> Shown:
    tasks: list[v1.BackgroundTask] = []
    after = ""
    while len(tasks) < args.limit:
        page = await stubs.tasks.list_tasks(v1.ListTasksRequest(
            state=_STATES.get(args.state, v1.BackgroundTaskState.UNSPECIFIED), kind=args.kind,
            parent_run_id=args.run, limit=min(args.limit, 500), after_task_id=after))
        tasks += page.tasks
        after = page.next_after_task_id
        if not after:
            break
    tasks = tasks[: args.limit]
    return Shown(tasks, ["TASK", "KIND", "STATE", "ATTEMPTS", "PARENT RUN", "UPDATED"],
                 [_row(t) for t in tasks])


async def _show(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.tasks.get_task(v1.GetTaskRequest(task_id=args.task_id))
    task = answer.task or v1.BackgroundTask()
    return Shown(task, line=_task_lines(task))


async def _cancel(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.tasks.cancel_task(v1.CancelTaskRequest(task_id=args.task_id,
                                                                reason=args.reason))
    task = answer.task or v1.BackgroundTask()
    return Shown(task, line=f"task {task.task_id}: {enum_name(task.state)}")


def add_parser(commands: SubParsers) -> None:
    """Register the ``tasks`` group."""
    sub = add_group(commands, "tasks", "background tasks: state, lease, attempts; cancel "
                                       "(operators)")
    listing = add_command(sub, "list", "list background tasks", _list)
    listing.add_argument("--state", choices=sorted(_STATES), default="")
    listing.add_argument("--kind", default="", help="only tasks of this kind")
    listing.add_argument("--run", default="", help="only tasks of this parent run")
    listing.add_argument("--limit", type=int, default=100)
    add_command(sub, "show", "one task", _show).add_argument("task_id")
    cancel = add_command(sub, "cancel", "cancel a task", _cancel)
    cancel.add_argument("task_id")
    cancel.add_argument("--reason", default="", help="recorded with the cancellation")
