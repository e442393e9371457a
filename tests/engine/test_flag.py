"""``Flag`` behaves as ``asyncio.Event`` (the oracle) under any sequence of set, clear,
wait, cancel and yield, and holds no waiters' queue until something waits."""

from __future__ import annotations

import asyncio
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from palyra.engine.run.flag import Flag

OPS = st.lists(st.sampled_from(["set", "clear", "wait", "cancel", "yield"]), max_size=40)


async def _trace(make: type, ops: list[str]) -> list[tuple[bool, tuple[str, ...]]]:
    """After each op: is it set, and the state of every waiter so far."""
    flag = make()
    waiters: list[asyncio.Task[object]] = []
    out = []
    for op in ops:
        if op == "set":
            flag.set()
        elif op == "clear":
            flag.clear()
        elif op == "wait":
            waiters.append(asyncio.ensure_future(flag.wait()))
        elif op == "cancel" and waiters:
            waiters[len(waiters) // 2].cancel()
        for _ in range(3):  # let wake-ups and cancellations land
            await asyncio.sleep(0)
        states = tuple("cancelled" if t.cancelled() else "done" if t.done() else "waiting"
                       for t in waiters)
        out.append((flag.is_set(), states))
    for task in waiters:
        task.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    return out


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_flag_behaves_as_asyncio_event(ops: list[str]) -> None:
    assert asyncio.run(_trace(Flag, ops)) == asyncio.run(_trace(asyncio.Event, ops))


def test_an_unwaited_flag_is_small() -> None:
    # What an idle open run holds three of (an asyncio.Event: its dict and deque, ~800 B).
    flag = Flag()
    assert sys.getsizeof(flag) < 100 and not hasattr(flag, "__dict__")
