"""Run a coroutine's first step at once, and arm a timer only if it suspends.

Most built-in tools finish without ever suspending (``add``, a file read), yet
an ``asyncio.timeout`` costs a timer handle pushed on and cancelled off the
loop's heap for every call. ``first_step`` runs the handler up to its first
suspension in the caller's task; only a handler that suspends is continued by
``resume`` (under the timer), which delivers every send, throw and close to it
exactly as an ``await`` would. A step that blocks without suspending could not
be interrupted by the timer anyway; the caller measures its deadline from
before the first step, so the limit means the same in both cases.

Pure (no asyncio): the tool registry uses it for a handler's timer, and the engine
for an approved call, which needs a task of its own only if it suspends.
"""

from __future__ import annotations

import types
from collections.abc import Awaitable, Generator
from typing import Any, TypeVar

T = TypeVar("T")


class Suspended:
    """What a coroutine yielded at its first suspension (for ``resume``)."""

    __slots__ = ("coro", "yielded")

    def __init__(self, coro: Generator[Any, Any, Any], yielded: Any) -> None:
        self.coro = coro
        self.yielded = yielded


def first_step(awaitable: Awaitable[T]) -> T | Suspended:
    """Run ``awaitable`` until it returns (its result) or first suspends (a ``Suspended``).

    Raises:
        BaseException: whatever ``awaitable`` raises in that step.
    """
    coro = awaitable.__await__()  # a coroutine's own iterator; any awaitable has one
    try:
        yielded = coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    return Suspended(coro, yielded)


@types.coroutine
def resume(suspended: Suspended) -> Generator[Any, Any, Any]:
    """Await the rest of a suspended coroutine from the running task."""
    coro, yielded = suspended.coro, suspended.yielded
    while True:
        try:
            sent = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # cancellation included: the handler sees it
            try:
                yielded = coro.throw(exc)
            except StopIteration as done:
                return done.value
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration as done:
                return done.value
