"""``RunDeadline``: one timer across a run's model calls, with ``asyncio.timeout``'s meaning.

Real event loop, real sleeps (tens of milliseconds): the timer's early firing,
its re-arming and the conversion to ``TimeoutError`` are what is under test.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from palyra.engine.run.deadline import RunDeadline


async def test_a_block_past_its_limit_raises_timeout() -> None:
    deadline = RunDeadline()
    with pytest.raises(TimeoutError), deadline.within(0.02):
        await asyncio.sleep(5)
    deadline.close()


async def test_a_limit_already_spent_fires_at_the_first_suspension() -> None:
    deadline = RunDeadline()
    with pytest.raises(TimeoutError), deadline.within(-1.0):
        await asyncio.sleep(0)
    deadline.close()


async def test_a_block_within_its_limit_returns_and_leaves_no_pending_cancel() -> None:
    deadline = RunDeadline()
    with deadline.within(5.0):
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.01)  # a stray cancel of the task would land here
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    deadline.close()


async def test_the_timer_of_an_earlier_block_does_not_cut_a_later_one_short() -> None:
    # First block: limit 0.05 s from t0, so the timer is due at t0+0.05. The
    # second block starts at ~t0+0.04 with a fresh 0.2 s: the old timer fires
    # inside it and must re-arm, not cancel.
    deadline = RunDeadline()
    with deadline.within(0.05):
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.04)
    with deadline.within(0.2):
        await asyncio.sleep(0.1)  # past the first timer, well within the second limit
    with pytest.raises(TimeoutError), deadline.within(0.03):  # the re-armed timer still holds the limit
        await asyncio.sleep(5)
    deadline.close()


async def test_a_limit_earlier_than_the_armed_timer_re_arms_it() -> None:
    deadline = RunDeadline()
    with deadline.within(10.0):
        await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError), deadline.within(0.03):
        await asyncio.sleep(5)
    assert loop.time() - started < 1.0
    deadline.close()


async def test_another_cancellation_stays_a_cancellation() -> None:
    deadline = RunDeadline()

    async def body() -> None:
        with deadline.within(0.02):
            await asyncio.sleep(5)

    task = asyncio.create_task(body())
    await asyncio.sleep(0)
    task.cancel()  # an abort or park, before the limit
    with pytest.raises(asyncio.CancelledError):
        await task
    deadline.close()


async def test_close_drops_the_timer() -> None:
    deadline = RunDeadline()
    with deadline.within(30.0):
        await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    scheduled: list[asyncio.TimerHandle] = loop._scheduled  # type: ignore[attr-defined]
    armed = sum(not h.cancelled() for h in scheduled)
    deadline.close()
    after = sum(not h.cancelled() for h in scheduled)
    assert after == armed - 1


async def test_a_cancellation_meeting_the_deadline_stays_a_cancellation() -> None:
    # The limit and an abort land in the same loop iteration (the body blocks
    # past both): the task must see the abort, not a timeout.
    deadline = RunDeadline()

    async def body() -> None:
        with deadline.within(0.01):
            time.sleep(0.05)  # noqa: ASYNC251 -- blocks the loop so both timers fall due
            await asyncio.sleep(5)

    task = asyncio.create_task(body())
    asyncio.get_running_loop().call_later(0.02, task.cancel)
    with pytest.raises(asyncio.CancelledError):
        await task
    deadline.close()
