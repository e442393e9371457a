"""The run's wall-clock deadline over its model calls: one timer a run, not one a call.

The active-time budget (``Step.remaining_wall_s``) is spent only inside model
calls, so each call ends by ``now + remaining``. ``asyncio.timeout`` around each
call would push a timer handle onto the loop's heap and cancel it again per
call (on this Python also two coroutines and a state machine: ~4 µs a call).
Here one timer handle lives across the run's calls instead. Between calls the
deadline only moves later (time outside a call is not spent), so a timer armed
for an earlier call fires early, never late: when it fires it checks the call
in progress (if any) against that call's own deadline and re-arms itself if the
deadline is still ahead. Only a deadline that moved earlier than the timer (a
summariser call spent budget in between, or a fresh budget is smaller) re-arms
it at entry. On exit the conversion is ``asyncio.timeout``'s: the cancellation
this deadline caused, and no other, becomes ``TimeoutError``.
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType


class RunDeadline:
    """``with deadline.within(seconds):`` — like ``async with asyncio.timeout(seconds):``,
    for blocks of one run that never overlap. ``close`` when the run's work ends.

    A deadline already past fires at the block's first suspension, as with
    ``asyncio.timeout``. Another cancellation of the task (an abort, a park) that
    meets the deadline stays a ``CancelledError``.
    """

    __slots__ = ("_delay", "_due", "_fired", "_handle", "_task", "_when")

    def __init__(self) -> None:
        self._delay = 0.0
        self._when = 0.0
        self._task: asyncio.Task[object] | None = None
        self._handle: asyncio.Handle | None = None
        self._due = 0.0  # when ``_handle`` fires
        self._fired = False

    def within(self, delay: float) -> RunDeadline:
        """Set the next block's limit (seconds from its entry)."""
        self._delay = delay
        return self

    def __enter__(self) -> RunDeadline:
        if self._task is not None:
            raise RuntimeError("RunDeadline blocks must not overlap")
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("RunDeadline should be used inside a task")
        loop = asyncio.get_running_loop()
        self._when = when = loop.time() + self._delay
        self._task = task
        self._fired = False
        handle = self._handle
        if handle is None or self._due > when:
            if handle is not None:
                handle.cancel()
            self._arm(loop, when)
        return self

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if when <= loop.time():
            # Spent already: fire before anything already queued, as asyncio.timeout does.
            self._due = -math.inf
            self._handle = loop.call_soon(self._fire)
        else:
            self._due = when
            self._handle = loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._handle = None
        task = self._task
        if task is None:  # between blocks: the next entry arms a fresh timer
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self._when:  # armed for an earlier block's deadline
            self._arm(loop, self._when)
            return
        self._fired = True
        task.cancel()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        task, self._task = self._task, None
        if (self._fired and task is not None and task.uncancel() == 0
                and exc_type is asyncio.CancelledError):
            raise TimeoutError from exc

    def close(self) -> None:
        """Drop the timer (the run's work is over; a later block arms a new one)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
