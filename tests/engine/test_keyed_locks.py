"""``KeyedLocks``: per-name locks or slots whose entries live only while in use.

Names come from outside (Discord routes, channel names an operator routes to), so
an entry must go when its last holder or waiter leaves, on every path out.
"""

from __future__ import annotations

import asyncio

import pytest

from palyra.engine import KeyedLocks, SlotWaitTimeout


async def test_slots_bound_how_many_hold_a_name_at_once() -> None:
    locks, inside, most = KeyedLocks(), 0, 0

    async def hold() -> None:
        nonlocal inside, most
        async with locks.hold("chan", slots=3):
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.01)
            inside -= 1

    await asyncio.gather(*(hold() for _ in range(10)))
    assert most == 3
    assert len(locks) == 0


async def test_a_wait_that_times_out_leaves_no_entry_and_the_holder_keeps_its_slot() -> None:
    locks, release = KeyedLocks(), asyncio.Event()

    async def holder() -> None:
        async with locks.hold("chan", slots=1):
            await release.wait()

    held = asyncio.create_task(holder())
    await asyncio.sleep(0)
    with pytest.raises(SlotWaitTimeout):
        async with locks.hold("chan", wait_s=0.01):
            pytest.fail("a slot was given while the holder had it")
    assert len(locks) == 1  # the holder's entry, not the waiter's
    release.set()
    await held
    assert len(locks) == 0


async def test_a_timeout_inside_the_body_is_not_taken_for_a_busy_slot() -> None:
    locks = KeyedLocks()
    with pytest.raises(TimeoutError) as raised:
        async with locks.hold("chan", wait_s=1.0):
            async with asyncio.timeout(0.001):
                await asyncio.sleep(1)
    assert not isinstance(raised.value, SlotWaitTimeout)
    assert len(locks) == 0


async def test_many_names_leave_nothing_behind() -> None:
    locks = KeyedLocks()
    for i in range(2000):
        async with locks.hold(f"webhook:name-{i}", slots=4, wait_s=1.0):
            pass
    with pytest.raises(RuntimeError):
        async with locks.hold("boom"):
            raise RuntimeError("body failed")
    assert len(locks) == 0


async def test_a_free_slot_with_a_wait_bound_arms_no_timer(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    # A semaphore that can be taken at once needs no timeout: one is armed only when
    # every slot is held (and then it still bounds the wait).
    armed: list[float | None] = []
    real = asyncio.timeout

    def counting(delay: float | None) -> asyncio.Timeout:
        armed.append(delay)
        return real(delay)

    monkeypatch.setattr(asyncio, "timeout", counting)
    locks, release = KeyedLocks(), asyncio.Event()
    async with locks.hold("chan", slots=2, wait_s=1.0):
        pass
    assert armed == []

    async def holder() -> None:
        async with locks.hold("chan", slots=2, wait_s=1.0):
            await release.wait()

    held = [asyncio.create_task(holder()) for _ in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(SlotWaitTimeout):
        async with locks.hold("chan", slots=2, wait_s=0.01):
            pytest.fail("a slot was given while both were held")
    assert armed == [0.01]
    release.set()
    await asyncio.gather(*held)
    assert len(locks) == 0


async def test_hold_all_takes_in_order_and_a_cancelled_wait_gives_back_what_it_took() -> None:
    locks, release = KeyedLocks(), asyncio.Event()

    async def holder() -> None:
        async with locks.hold("b"):
            await release.wait()

    held = asyncio.create_task(holder())
    await asyncio.sleep(0)
    waiting = asyncio.create_task(locks.hold_all(["a", "b"]).__aenter__())
    await asyncio.sleep(0.01)
    assert not waiting.done() and len(locks) == 2  # "a" taken, "b" awaited
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    async with locks.hold("a"):  # given back: free at once
        assert len(locks) == 2
    release.set()
    await held
    async with locks.hold_all(["a", "b"]):
        assert len(locks) == 2
    assert len(locks) == 0
