"""Schedules in the journal, and the loop that fires them onto the task queue.

A firing is one commit: the ``background_prompt`` task (its idempotency key
``schedule:<id>:<fire ms>``) and the schedule's row moved to its next firing,
so a crash before the commit fires it at the next start and a crash after it
finds the task queued, never a second one. The task's handler starts the run
whose id is the task id, so a retried task finds its run instead of starting
another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from functools import partial

import msgspec

from palyra.core.errors import NotFound
from palyra.core.ids import new_ulid
from palyra.journal import EntityWrite, EventDraft, JournalStore
from palyra.schedules.model import ScheduleRecord, due, validate
from palyra.tasks import TaskQueue, TaskRecord

TABLE = "meta"
PREFIX = "schedule:"
PROMPT_TASK = "background_prompt"
ACTOR = "system:scheduler"
_log = logging.getLogger("palyra.schedules")


def _now() -> int:
    return time.time_ns() // 1_000_000


class Schedules:
    """Create, list, delete schedules; fire the due ones (``run`` loop or ``fire_due``)."""

    def __init__(self, store: JournalStore, tasks: TaskQueue, *,
                 now_ms: Callable[[], int] = _now) -> None:
        self._store = store
        self._tasks = tasks
        self._now = now_ms
        self._changed = asyncio.Event()
        self._following = False

    def all(self) -> list[ScheduleRecord]:
        """Every schedule, in id (creation) order."""
        out: list[ScheduleRecord] = []
        after = ""
        while True:
            rows = self._store.scan_entities(TABLE, PREFIX, after, 1000)
            out += [msgspec.msgpack.decode(raw, type=ScheduleRecord) for _k, raw in rows]
            if len(rows) < 1000:
                return out
            after = rows[-1][0]

    def get(self, schedule_id: str) -> ScheduleRecord | None:
        """The schedule, or None."""
        raw = self._store.get_entity(TABLE, PREFIX + schedule_id) if schedule_id else None
        return msgspec.msgpack.decode(raw, type=ScheduleRecord) if raw is not None else None

    async def create(self, rec: ScheduleRecord) -> ScheduleRecord:
        """Store a new schedule with its first firing."""
        now = self._now()
        rec = validate(msgspec.structs.replace(rec, schedule_id=new_ulid(now), created_ms=now),
                       now)
        await self._write("schedule.created", rec, _row(rec))
        self._changed.set()
        return rec

    async def delete(self, schedule_id: str, by: str) -> ScheduleRecord:
        """Remove a schedule (queued firings still run).

        Raises:
            NotFound: no such schedule.
        """
        rec = self.get(schedule_id)
        if rec is None:
            raise NotFound(f"no schedule {schedule_id}", details={"schedule_id": schedule_id})
        await self._write("schedule.deleted", rec, EntityWrite(TABLE, PREFIX + schedule_id, None),
                          actor=by)
        self._changed.set()
        return rec

    async def fire_due(self) -> list[str]:
        """Queue every due firing (one commit each); the ids of the tasks queued."""
        now = self._now()
        queued = []
        for rec in self.all():
            step = due(rec, now)
            if step is None:
                continue
            moved = msgspec.structs.replace(
                rec, next_fire_ms=step.next_fire_ms,
                fired_count=rec.fired_count + (1 if step.fire_ms else 0),
                last_fire_ms=step.fire_ms or rec.last_fire_ms)
            if not step.fire_ms:  # a missed firing skipped by its policy
                await self._write("schedule.skipped", moved, _row(moved))
                continue
            task, created = await self._tasks.enqueue(
                PROMPT_TASK, payload={"schedule_id": rec.schedule_id, "fire_ms": step.fire_ms},
                idempotency_key=f"schedule:{rec.schedule_id}:{step.fire_ms}",
                also=_fired(moved, step.fire_ms))
            if created:
                queued.append(task.task_id)
            else:  # fired before a crash: only the row's move was lost
                await self._write("schedule.advanced", moved, _row(moved))
        return queued

    def next_wake_ms(self) -> int:
        """The earliest next firing (0: none)."""
        times = [r.next_fire_ms for r in self.all() if r.next_fire_ms]
        return min(times, default=0)

    async def run(self) -> None:
        """Fire schedules as they come due, until cancelled."""
        if not self._following:
            # Several daemons on one journal: a schedule made on another daemon wakes
            # this loop too (it runs on one daemon only, ``daemon/singletons.py``).
            self._following = True
            loop = asyncio.get_running_loop()
            self._store.on_foreign_rows(partial(_wake_on_schedules, loop, self._changed))
            # Rows nobody can tell: any schedule may have changed, so look again.
            self._store.on_foreign_unknown(partial(_wake, loop, self._changed))
        while True:
            try:
                await self.fire_due()
            except Exception:
                _log.exception("firing schedules failed")
            self._changed.clear()
            wake = self.next_wake_ms()
            delay = 60.0 if not wake else max(0.0, min(60.0, (wake - self._now()) / 1000))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), delay)

    async def _write(self, kind: str, rec: ScheduleRecord, write: EntityWrite,
                     actor: str = ACTOR) -> None:
        await self._store.append([EventDraft(
            kind=kind, actor=actor, principal=rec.principal,
            payload={"schedule_id": rec.schedule_id, "next_fire_ms": rec.next_fire_ms},
            entity_writes=(write,))])


def _fired(moved: ScheduleRecord, fire_ms: int) -> Callable[[TaskRecord], list[EventDraft]]:
    """The drafts that commit with a firing's task: the event and the row moved on."""
    def drafts(task: TaskRecord) -> list[EventDraft]:
        return [EventDraft(kind="schedule.fired", actor=ACTOR, principal=moved.principal,
                           payload={"schedule_id": moved.schedule_id, "fire_ms": fire_ms,
                                    "task_id": task.task_id},
                           entity_writes=(_row(moved),))]

    return drafts


def _row(rec: ScheduleRecord) -> EntityWrite:
    return EntityWrite(TABLE, PREFIX + rec.schedule_id, msgspec.msgpack.encode(rec))




def _wake_on_schedules(loop: asyncio.AbstractEventLoop, changed: asyncio.Event,
                       rows: list[tuple[str, str]]) -> None:
    """Another daemon's commit wrote ``rows`` (on the store's watcher thread)."""
    if any(table == TABLE and key.startswith(PREFIX) for table, key in rows):
        _wake(loop, changed)


def _wake(loop: asyncio.AbstractEventLoop, changed: asyncio.Event) -> None:
    """Set ``changed`` on ``loop`` (from the store's watcher thread)."""
    if not loop.is_closed():
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(changed.set)
