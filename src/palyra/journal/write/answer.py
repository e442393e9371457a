"""Answering callers: one wake-up per event loop per commit, followers first.

The writer thread hands each commit's answers to the callers' event loops
with ``call_soon_threadsafe``; the same call hands that loop's followers the
commit's events, before the callers hear of it (once an append returns, its
events have reached every follower on its loop).
"""

from __future__ import annotations

import contextlib
from typing import Any

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal.read.follow import Deliveries, deliver
from palyra.journal.write.requests import Waiting


def fail(batch: list[Any], exc: BaseException) -> None:
    """Answer every request of ``batch`` with ``UNAVAILABLE`` caused by ``exc``."""
    error = PalyraError(f"journal commit failed: {exc}", code=ErrorCode.UNAVAILABLE)
    error.__cause__ = exc
    for request in batch:
        request.error = error
    resolve(batch)


def resolve(batch: list[Any], deliveries: Deliveries | None = None) -> None:
    """Settle ``batch``'s futures and hand ``deliveries`` to followers, per event loop."""
    loop = batch[0].loop
    if not deliveries and len(batch) == 1:  # a lone caller, nobody following
        # try, not contextlib.suppress: no context manager object on every commit.
        try:  # noqa: SIM105
            loop.call_soon_threadsafe(_settle, batch)
        except RuntimeError:  # a closed loop: nobody is waiting any more
            pass
        return
    by_loop: dict[Any, list[Waiting]] = {}
    if len({request.loop for request in batch}) == 1:  # one loop (a daemon's): no regrouping
        by_loop[loop] = batch
    else:
        for request in batch:
            by_loop.setdefault(request.loop, []).append(request)
    for loop, requests in by_loop.items():
        items = deliveries.pop(loop, None) if deliveries else None
        # A closed loop raises RuntimeError: nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            if items:
                loop.call_soon_threadsafe(_deliver_and_settle, items, requests)
            else:
                loop.call_soon_threadsafe(_settle, requests)
    for loop, items in (deliveries or {}).items():  # followers on loops with no caller
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(deliver, items)


def _deliver_and_settle(items: list[Any], requests: list[Waiting]) -> None:
    deliver(items)
    _settle(requests)


def _settle(requests: list[Waiting]) -> None:
    for request in requests:
        future = request.future
        if future.done():
            continue  # caller was cancelled; the write is durable regardless
        if request.error is not None:
            future.set_exception(request.error)
        else:
            future.set_result(request.result)
