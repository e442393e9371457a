"""``KeyedLocks``: per-name locks or slots whose entries live only while in use.

Names come from outside (Discord routes, channel names an operator routes to), so
an entry must go when its last holder or waiter leaves, on every path out.
"""

from __future__ import annotations

import asyncio
import random

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


async def test_an_uncontended_hold_makes_no_lock_and_a_contended_one_keeps_the_order(
        ) -> None:
    """A name held by one holder at a time is a count, with no asyncio lock behind it;
    the first hold that must wait makes one, taken for the holders already in, and the
    waiters then get the name in the order they came."""
    locks, release, order = KeyedLocks(), asyncio.Event(), []
    async with locks.hold("s"):
        assert locks._gates["s"].gate is None

    async def holder() -> None:
        async with locks.hold("s"):
            await release.wait()
            order.append("first")

    async def waiter(tag: str) -> None:
        async with locks.hold("s"):
            order.append(tag)
            await asyncio.sleep(0)

    first = asyncio.create_task(holder())
    await asyncio.sleep(0)
    assert locks._gates["s"].gate is None  # held as a count
    waiters = [asyncio.create_task(waiter(f"w{i}")) for i in range(4)]
    await asyncio.sleep(0.01)
    assert isinstance(locks._gates["s"].gate, asyncio.Lock) and order == []
    release.set()
    await asyncio.gather(first, *waiters)
    assert order == ["first", "w0", "w1", "w2", "w3"]
    assert len(locks) == 0


@pytest.mark.parametrize("slots", [1, 2, 3])
async def test_slots_hold_under_churn_with_cancelled_and_timed_out_waiters(slots: int) -> None:
    """Holders come and go, some waits are cancelled and some time out: never more than
    ``slots`` inside, every entry gone at the end, and the name still works."""
    locks, inside, most = KeyedLocks(), 0, 0
    rng = random.Random(slots)

    async def hold(i: int) -> None:
        nonlocal inside, most
        try:
            async with locks.hold("n", slots=slots, wait_s=0.005 if i % 5 == 0 else None):
                inside += 1
                most = max(most, inside)
                try:
                    await asyncio.sleep(rng.random() * 0.003)
                finally:
                    inside -= 1
        except SlotWaitTimeout:
            pass

    for _round in range(5):
        tasks = [asyncio.create_task(hold(i)) for i in range(40)]
        await asyncio.sleep(0.001)
        for task in tasks[::7]:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert inside == 0 and len(locks) == 0
    assert most == slots
    async with locks.hold("n", slots=slots):
        assert locks._gates["n"].gate is None
