"""bench.journal's drive loop: every index appended exactly once by the concurrent workers,
an appender's error ends the drive, and the drafts are the same for every contender."""

from __future__ import annotations

import asyncio

import pytest

from bench.journal import CONCURRENCY, MIN_APPENDS_PER_APPENDER, _draft, _drive, appends_at


@pytest.mark.parametrize(("appenders", "count"), [(1, 5), (8, 100), (16, 3), (4, 0)])
async def test_every_index_is_appended_once(appenders: int, count: int) -> None:
    seen: list[int] = []
    running = 0
    most = 0

    async def append(i: int) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0)
        seen.append(i)
        running -= 1

    seconds = await _drive(appenders, range(count), append)
    assert sorted(seen) == list(range(count))
    assert seconds >= 0
    assert most == min(appenders, count)  # the workers ran concurrently, no more of them


async def test_an_appender_error_ends_the_drive() -> None:
    done: list[int] = []

    async def append(i: int) -> None:
        await asyncio.sleep(0)
        if i == 7:
            raise RuntimeError("append failed")
        done.append(i)

    with pytest.raises(RuntimeError, match="append failed"):
        await _drive(4, range(1000), append)
    stopped_at = len(done)
    for _ in range(20):
        await asyncio.sleep(0)  # a worker left running would go on appending here
    assert len(done) == stopped_at < 999  # the other workers stopped with the drive


def test_drafts_are_fresh_and_alike() -> None:
    one, two = _draft(41), _draft(41)
    assert one == two and one.payload is not two.payload
    assert (one.session_id, one.run_id, one.tape) == ("s9", "r1", True)
    assert one.payload == {"model_token": {"token": "tok41", "is_final": False}, "i": 41}


@pytest.mark.parametrize("events", [1, 3000, 100_000])
def test_every_appender_appends_often_enough_to_be_measured(events: int) -> None:
    # A slice of a few ms at 256 appenders measures tasks starting and draining, not the store.
    for appenders in CONCURRENCY:
        n = appends_at(appenders, events)
        assert n >= events
        assert n // appenders >= MIN_APPENDS_PER_APPENDER
    assert appends_at(1, events) == max(events, MIN_APPENDS_PER_APPENDER)
