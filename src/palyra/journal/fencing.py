"""A lease that fences every append one asyncio task makes (a singleton's work).

A singleton (a schedule loop, a channel poller) runs on one daemon at a time,
under a lease (``palyra.daemon.singletons``). Its writes reach the journal through
layers that know nothing of it (the task queue's enqueue, a channel's
admission), so instead of threading a ``fence`` argument through each of them
the singleton's task declares the lease once: every append that *this task*
submits inside :func:`fenced_writes` commits only while the lease is its name's
current term, so a holder whose lease was taken over writes nothing more, even
before it notices.

Only the declaring task is fenced. Tasks it spawns inherit the context
variable but not the fence: a channel dispatch handed to a worker from inside
a poller's admission is the worker's work, not the poller's, and must not fail
when the poller's lease moves.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from palyra.core.errors import PalyraInternalError
from palyra.journal._types import Lease

_AMBIENT: ContextVar[tuple[asyncio.Task[object], Lease] | None] = ContextVar(
    "palyra_journal_fence", default=None)


@contextlib.contextmanager
def fenced_writes(lease: Lease) -> Iterator[None]:
    """Fence every append the current task submits inside the block by ``lease``.

    Raises:
        PalyraInternalError: called outside an asyncio task.
    """
    task = asyncio.current_task()
    if task is None:
        raise PalyraInternalError("fenced_writes needs a running asyncio task")
    token = _AMBIENT.set((task, lease))
    try:
        yield
    finally:
        _AMBIENT.reset(token)


declared = _AMBIENT.get
"""None unless some task in this context declared a fence (:func:`ambient_fence` then
says whether it is the current task's): a C call, which ``JournalStore.submit`` makes
on every append before it calls :func:`ambient_fence` (nearly never)."""


def ambient_fence() -> Lease | None:
    """The lease fencing the current task's appends, if it declared one."""
    held = _AMBIENT.get()
    if held is None:
        return None
    task, lease = held
    return lease if asyncio.current_task() is task else None
