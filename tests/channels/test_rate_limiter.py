"""The outbox's per-sink rate limiter: starts evenly spaced, in arrival order."""

from __future__ import annotations

import asyncio
import time

from palyra.channels.outbox import RateLimiter


def test_each_caller_reserves_the_next_start_as_it_arrives() -> None:
    limiter = RateLimiter(10.0)  # a start every 0.1 s
    before = time.monotonic()
    delays = [limiter.reserve() for _ in range(4)]
    spent = time.monotonic() - before
    assert delays[0] == 0.0
    for n, delay in enumerate(delays[1:], start=1):  # 0.1, 0.2, 0.3 s from the first
        assert n * 0.1 - spent <= delay <= n * 0.1


def test_a_free_limiter_or_an_unlimited_one_never_waits() -> None:
    assert [RateLimiter(0).reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    limiter = RateLimiter(1000.0)
    assert limiter.reserve() == 0.0
    time.sleep(0.01)  # past its next start
    assert limiter.reserve() == 0.0


async def test_concurrent_senders_start_no_faster_than_the_rate() -> None:
    limiter = RateLimiter(50.0)  # 20 ms apart
    starts: list[float] = []

    async def send() -> None:
        delay = limiter.reserve()
        if delay > 0:
            await asyncio.sleep(delay)
        starts.append(time.monotonic())

    began = time.monotonic()
    await asyncio.gather(*(send() for _ in range(6)))
    # The k-th start is no earlier than k intervals after the first reservation (a timer
    # may fire a clock tick early; one firing late only delays those after it).
    assert [s - began >= k * 0.02 - 0.001 for k, s in enumerate(starts)] == [True] * 6, \
        [round(s - began, 4) for s in starts]
