"""Admission on a fake clock: the platforms' redelivery schedules start nothing twice (also
across a restart), and the coalescer batches in order, loses and repeats nothing, and never
holds a message past its maximum wait."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palyra.channels import (
    COMMAND_TASK,
    DISPATCH_TASK,
    ChannelRouter,
    ChannelsConfig,
    Envelope,
    PairingBook,
)
from palyra.channels.config import ChannelPolicy
from palyra.journal import JournalStore
from palyra.policy import PolicyGate
from palyra.tasks import TaskQueue

MIN = 60_000
HOUR = 60 * MIN


class Clock:
    def __init__(self, start: int = 1_800_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now


async def _open(data: Path, clock: Clock, config: ChannelsConfig
                ) -> tuple[JournalStore, TaskQueue, ChannelRouter]:
    store = JournalStore.open(data)
    tasks = TaskQueue(store, now_ms=clock)
    await tasks.start()
    # Admission never touches the engine (dispatch does, and is not run here).
    router = ChannelRouter(store, None, tasks, PairingBook(store, now_ms=clock),  # type: ignore[arg-type]
                           PolicyGate.load(), config, now_ms=clock)
    return store, tasks, router


def _envelope(text: str, sender: str = "u1", conversation: str = "C1") -> Envelope:
    return Envelope(envelope_id="", channel="slack:acme", conversation_id=conversation,
                    sender=sender, text=text, sender_verified=True, mentions_agent=True)


OPEN = ChannelsConfig(default=ChannelPolicy(dm_policy="allow"))


@pytest.mark.parametrize(("provider", "schedule_ms"), [
    # Slack: immediately, after 1 minute, after 5 minutes.
    ("slack", [0, MIN, 5 * MIN]),
    # Standard Webhooks' suggested schedule: now, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h.
    ("webhook", [0, 5_000, 5 * MIN, 30 * MIN, 2 * HOUR, 5 * HOUR, 10 * HOUR, 10 * HOUR]),
])
async def test_redelivery_schedules_start_nothing_twice(tmp_path: Path, provider: str,
                                                        schedule_ms: list[int]) -> None:
    clock = Clock()
    store, tasks, router = await _open(tmp_path / "data", clock, OPEN)
    outcomes = []
    try:
        for index, delay in enumerate(schedule_ms):
            clock.now += delay
            if index == len(schedule_ms) // 2:  # a restart in the middle of the schedule
                await tasks.close()
                store.close()
                store, tasks, router = await _open(tmp_path / "data", clock, OPEN)
            outcomes.append(await router.admit(_envelope("@palyra deploy please"),
                                               dedupe=(provider, "T0123", "Ev1")))
        first, *redeliveries = outcomes
        assert first.accepted and not first.duplicate and first.task_id
        assert all(r.duplicate and r.envelope_id == first.envelope_id
                   and r.task_id == first.task_id for r in redeliveries)
        dispatches = tasks.page(kind=DISPATCH_TASK)[0]
        assert [t.task_id for t in dispatches] == [first.task_id]
        admitted = [e for e in store.read_range(0, 10_000) if e.kind == "channel.message_admitted"]
        assert len(admitted) == 1
        # Past the (configurable) window the key is forgotten and swept away.
        clock.now += OPEN.dedupe_window_s * 1000
        assert await router.sweep() == 1
        late = await router.admit(_envelope("@palyra deploy please"),
                                  dedupe=(provider, "T0123", "Ev1"))
        assert not late.duplicate and late.envelope_id != first.envelope_id
    finally:
        await tasks.close()
        store.close()


# A burst: (gap before the message in ms, sender, is a command).
bursts = st.lists(st.tuples(st.integers(0, 900), st.sampled_from(["u1", "u2"]),
                            st.booleans()), min_size=1, max_size=25)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(burst=bursts)
async def test_coalescer_orders_keeps_and_bounds(tmp_path_factory: pytest.TempPathFactory,
                                                 burst: list[tuple[int, str, bool]]) -> None:
    quiet, max_wait = 400, 1500
    config = ChannelsConfig(default=ChannelPolicy(debounce_ms=quiet, max_wait_ms=max_wait,
                                                  batch_cap=4, dm_policy="allow"))
    clock = Clock()
    store, tasks, router = await _open(tmp_path_factory.mktemp("c") / "data", clock, config)
    sent: dict[str, int] = {}  # envelope id -> admitted at
    order: dict[str, list[str]] = {"u1": [], "u2": []}
    runs: list[tuple[int, list[str]]] = []  # (claimed at, envelope ids)
    drains: list[int] = []  # when the test let due work run (the fake clock jumps between)

    async def drain_due() -> None:
        drains.append(clock.now)
        while True:
            ready = [t for t in tasks.page(state="queued")[0] if t.not_before_ms <= clock.now]
            if not ready:
                return
            task = await tasks.claim("w", frozenset({DISPATCH_TASK, COMMAND_TASK}))
            payload: dict[str, Any] = json.loads(task.payload_json)
            items = payload.get("items") or [payload]
            runs.append((clock.now, [i["envelope_id"] for i in items]))
            await tasks.succeed(task.task_id, task.lease_epoch)

    try:
        for gap, sender, command in burst:
            clock.now += gap
            await drain_due()
            admission = await router.admit(_envelope("/status" if command else "@palyra hi",
                                                     sender=sender))
            sent[admission.envelope_id] = clock.now
            if not command:  # commands bypass the coalescer: answered at once, by design
                order[sender].append(admission.envelope_id)
        for _ in range(20):  # let every debounce deadline pass
            clock.now += 100
            await drain_due()
        delivered = [e for _at, ids in runs for e in ids]
        assert sorted(delivered) == sorted(sent), "nothing lost, nothing duplicated"
        for sender, ids in order.items():
            assert [e for e in delivered if e in set(ids)] == ids, f"{sender} out of order"
        for at, ids in runs:
            assert len(ids) <= 4
            # A batch is due no later than max_wait after its first message: it runs at
            # the first drain from then on (the fake clock jumps up to 900 ms per step).
            due = sent[ids[0]] + max_wait
            assert at <= min(d for d in drains if d >= due), (at, due, drains)
    finally:
        await tasks.close()
        store.close()


async def test_concurrent_deliveries_of_one_event_admit_it_once(tmp_path: Path) -> None:
    import asyncio

    from palyra.core.errors import ErrorCode, PalyraError

    clock = Clock()
    store, tasks, router = await _open(tmp_path / "data", clock, OPEN)
    try:
        outcomes = await asyncio.gather(*[
            router.admit(_envelope("@palyra once"), dedupe=("slack", "T1", "Ev-race"))
            for _ in range(20)])
        assert sum(not o.duplicate for o in outcomes) == 1
        assert len({o.envelope_id for o in outcomes}) == 1
        assert len(tasks.page(kind=DISPATCH_TASK)[0]) == 1
        # A caller reusing an admitted envelope id under another event id is refused.
        taken = Envelope(envelope_id=outcomes[0].envelope_id, channel="slack:acme",
                         sender="u1", text="@palyra again", mentions_agent=True)
        with pytest.raises(PalyraError) as refused:
            await router.admit(taken, dedupe=("slack", "T1", "Ev-other"))
        assert refused.value.code == ErrorCode.ALREADY_EXISTS
    finally:
        await tasks.close()
        store.close()


async def test_one_platform_message_under_new_delivery_ids_is_admitted_once(
        tmp_path: Path) -> None:
    """The platform message id keys a message within its channel and conversation,
    whichever delivery carried it; the same id in another conversation is another message."""
    clock = Clock()
    store, tasks, router = await _open(tmp_path / "data", clock, OPEN)

    def message(conversation: str) -> Envelope:
        return msgspec.structs.replace(_envelope("@palyra hi", conversation=conversation),
                                       adapter_message_id="m-1")

    try:
        first = await router.admit(message("C1"), dedupe=("webhook", "hooks", "msg_a"))
        resent = await router.admit(message("C1"), dedupe=("webhook", "hooks", "msg_b"))
        elsewhere = await router.admit(message("C2"), dedupe=("webhook", "hooks", "msg_c"))
        assert not first.duplicate and resent.duplicate
        assert resent.envelope_id == first.envelope_id and resent.task_id == first.task_id
        assert not elsewhere.duplicate and elsewhere.envelope_id != first.envelope_id
        # The resend's own delivery id is not written: a third delivery under it is
        # found through the message key again, not through a row of its own.
        again = await router.admit(message("C1"), dedupe=("webhook", "hooks", "msg_b"))
        assert again.duplicate and again.envelope_id == first.envelope_id
        assert len(tasks.page(kind=DISPATCH_TASK)[0]) == 2
        clock.now += OPEN.dedupe_window_s * 1000
        assert await router.sweep() == 4, "two keys per admitted message, both swept"
    finally:
        await tasks.close()
        store.close()
