"""Other daemons' run ends cancel the ended runs' tasks here too (shared journal only).

On a shared journal a run's end commits alone and its daemon then cancels the run's
tasks, each by its own compare-and-set (``TaskQueue.cancelling_children``). If that
daemon dies between the two, the tasks would wait for some daemon's next start-up
sweep (``cancel_orphaned_tasks``). So every daemon follows the runs other daemons
write: a run that ended cancelled or failed while it still has unfinished tasks has
them cancelled here, after a grace delay that lets the run's own daemon do it first
(then this daemon's memory has followed those cancels and there is nothing left to do,
so the common case costs one dictionary look-up per foreign run row).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from palyra.core.errors import PalyraError
from palyra.engine import RUN_TABLE, Engine, IdentityRec, RunStateId
from palyra.journal import JournalStore
from palyra.tasks.queue import TaskQueue

log = logging.getLogger("palyra.tasks")

GRACE_S = 2.0
"""How long the run's own daemon has to cancel its tasks before another one does."""

_ENDED = (RunStateId.CANCELLED, RunStateId.FAILED)
_SYSTEM = IdentityRec("system:tasks")


class RunEndFollower:
    """Cancels the tasks of runs that other daemons ended (see the module's note)."""

    def __init__(self, store: JournalStore, engine: Engine, tasks: TaskQueue,
                 *, grace_s: float = GRACE_S) -> None:
        self._engine = engine
        self._tasks = tasks
        self._grace_s = grace_s
        self._due: dict[str, asyncio.TimerHandle] = {}  # run id -> its look, once
        self._closed = False
        if store.shared:
            loop = asyncio.get_running_loop()
            store.on_foreign_rows(lambda rows: self._rows(loop, rows))
            store.on_foreign_unknown(lambda: self._unknown(loop))

    def close(self) -> None:
        """Look at no more runs."""
        self._closed = True
        for handle in self._due.values():
            handle.cancel()
        self._due.clear()

    def _rows(self, loop: asyncio.AbstractEventLoop, rows: list[tuple[str, str]]) -> None:
        """On the watcher's thread: other daemons' commits wrote ``rows``."""
        runs = [key for table, key in rows if table == RUN_TABLE]
        if runs and not self._closed and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._written, loop, runs)

    def _unknown(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the watcher's thread: commits whose rows nobody can tell; any run with
        tasks may have ended, so each is looked at."""
        if not self._closed and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(
                    lambda: self._written(loop, self._tasks.runs_with_children()))

    def _written(self, loop: asyncio.AbstractEventLoop, run_ids: list[str]) -> None:
        for run_id in run_ids:
            if (not self._closed and run_id not in self._due
                    and self._tasks.has_children(run_id)):
                self._due[run_id] = loop.call_later(self._grace_s, self._look, run_id)

    def _look(self, run_id: str) -> None:
        self._due.pop(run_id, None)
        if self._closed or not self._tasks.has_children(run_id):
            return
        try:
            run = self._engine.get_run(_SYSTEM, run_id)
        except PalyraError as exc:
            log.warning("reading run %s for its tasks failed: %s", run_id, exc)
            return
        if run.state in _ENDED:
            self._tasks.cancel_children_soon(
                run_id, f"parent run {run_id} ended ({run.state})")
