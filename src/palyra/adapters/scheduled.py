"""The ``background_prompt`` task handler: one scheduled firing becomes one run.

The run's id is the task's id, so a task retried after a crash finds the run
it started (recovered like any run) and only waits on it. It runs as the
schedule's creator, served by the schedule's agent (its tools, postures and
model route), in the schedule's session, and completes when its loop ends. With
a sink, its answer is also queued to the channel outbox (``channel.send``).
"""

from __future__ import annotations

import contextlib
from typing import Any

from palyra.agents import AgentRegistry
from palyra.agents.model import postures_for, route_for
from palyra.channels.outbox import OutboundReply, queue_send
from palyra.channels.replies import split_utf8
from palyra.core.errors import ErrorCode, PalyraError
from palyra.engine import Engine, IdentityRec, RunStateId, Selectors, StartRun
from palyra.schedules import Schedules
from palyra.tasks import TaskQueue
from palyra.tasks.worker import Handler, TaskContext

# The smallest reply cap of the shipped sinks (Discord's 2,000 characters, in bytes
# to be safe with any of them); the sink cuts further if its own cap is lower.
REPLY_MAX_BYTES = 2000


def prompt_handler(engine: Engine, agents: AgentRegistry, schedules: Schedules,
                   tasks: TaskQueue | None = None) -> Handler:
    """The handler of ``background_prompt`` tasks (``tasks``: the queue a schedule's
    answer goes to the outbox through)."""

    async def handle(ctx: TaskContext) -> dict[str, Any]:
        rec = schedules.get(str(ctx.payload.get("schedule_id", "")))
        if rec is None:
            return {"skipped": "schedule deleted"}
        identity = IdentityRec(principal=rec.principal, device_id=rec.device_id)
        agent = agents.get(rec.agent_id) if rec.agent_id else None
        run_id = ctx.task.task_id
        with contextlib.suppress(PalyraError):
            # ALREADY_EXISTS: a retried firing; its run goes on (or has ended).
            await engine.start_run(identity, StartRun(
                Selectors(session_key=rec.session_key or f"schedule:{rec.schedule_id}"),
                text=rec.prompt, run_id=run_id, driver="schedule", complete=True,
                agent_id=agent.agent_id if agent else "",
                agent_postures=postures_for(agent, engine.tool_names()) if agent else {},
                model_route=route_for(agent) if agent else (),
                response_cache=agent.response_cache if agent else False))
        if engine.store.get_entity("runs", run_id) is None:
            raise PalyraError(f"scheduled run {run_id} did not start",
                              code=ErrorCode.UNAVAILABLE)
        done = await engine.wait_run(identity, run_id, until_terminal=True)
        if rec.sink and done.state == RunStateId.DONE and done.final_text and tasks is not None:
            # Once per firing (the outbox's idempotency keys), even if this task runs
            # again after a crash; the chunks go out in order, in one send task.
            await queue_send(tasks, [OutboundReply(
                sink=rec.sink, key=f"schedule:{run_id}:{index}", text=chunk,
                conversation_id=rec.conversation_id, thread_id=rec.thread_id)
                for index, chunk in enumerate(split_utf8(done.final_text, REPLY_MAX_BYTES))])
        return {"run_id": run_id, "state": done.state}

    return handle
