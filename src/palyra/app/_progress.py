"""A blocking walk's progress, relayed from its worker thread to an async stream.

The walk calls its progress callback with every position, in its own thread. The
callback wakes the event loop only every ``every`` positions and ``interval_s``
seconds, and the reader sees the newest position, not a queue of them: a slow
client gets fewer, later numbers, and memory stays the same whatever it does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Finished(Generic[T]):
    """The walk's return value: the last item a relay yields."""

    value: T


class _Latest:
    """The newest position, written by the worker thread, read on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, wake: asyncio.Event,
                 every: int, interval_s: float) -> None:
        self.position = 0
        self._loop, self._wake = loop, wake
        self._every, self._interval_s = every, interval_s
        self._woken_at, self._woken_time = 0, time.monotonic()

    def __call__(self, position: int) -> None:  # the worker thread, once per position
        self.position = position
        if position - self._woken_at < self._every:
            return
        now = time.monotonic()
        if now - self._woken_time < self._interval_s:
            return
        self._woken_at, self._woken_time = position, now
        self._loop.call_soon_threadsafe(self._wake.set)


async def relay_progress(work: Callable[[Callable[[int], None]], T], *, every: int,
                         interval_s: float) -> AsyncIterator[int | Finished[T]]:
    """Run ``work(progress)`` in a thread; yield rising positions, then ``Finished``.

    If the reader stops early the walk still runs to its end in its thread (a
    thread cannot be interrupted), as an abandoned unary call's would.
    """
    wake = asyncio.Event()
    latest = _Latest(asyncio.get_running_loop(), wake, every, interval_s)
    task = asyncio.ensure_future(asyncio.to_thread(work, latest))
    task.add_done_callback(lambda _: wake.set())
    sent = 0
    try:
        while not task.done():
            await wake.wait()
            wake.clear()
            if not task.done() and latest.position > sent:
                sent = latest.position
                yield sent
        yield Finished(task.result())
    finally:
        # A reader gone early owns no outcome: a failing walk is then not logged as
        # an exception nobody retrieved.
        task.add_done_callback(_retrieve)


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()
