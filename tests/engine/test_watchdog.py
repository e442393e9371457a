"""The self-healing watchdog against a real engine, queue and journal.

A run whose step hangs (a tool that sleeps) is reported once as a High
``run_stale`` incident; in ``auto`` mode it is failed with the reason
``watchdog_stale_heartbeat``. A task whose worker stopped heartbeating is
re-queued and its old epoch can write nothing. Incidents are listed and
acknowledged over the app API by operators, with who acknowledged.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from engine_harness import ADMIN, USER, Harness, loop_text, slow_add
from hypothesis import given
from hypothesis import strategies as st
from palyra_gen.palyra import v1 as pb

from palyra.core.errors import ErrorCode, PalyraError
from palyra.tasks import State, TaskQueue
from palyra.watchdog import Watchdog, WatchdogConfig, rules

LATER_MS = 121_000  # past the default 120 s threshold


def _later() -> int:
    return time.time_ns() // 1_000_000 + LATER_MS


async def _hung_run(harness: Harness) -> str:
    harness.tool = slow_add(300)
    app = await harness.start()
    created = await app.create_run(USER, pb.CreateRunRequest(
        v=1, session_key="hang", input=pb.MessageInput(text=loop_text(2)), complete=True))
    assert created.run is not None
    assert harness.engine is not None
    async with asyncio.timeout(5):
        while not any(phase == "tool" for _rec, phase in harness.engine.live_runs()):  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    return created.run.run_id


@pytest.mark.parametrize("mode", ["observe_only", "auto"])
async def test_a_hung_run_is_reported_once_and_failed_in_auto(harness: Harness, mode: str) -> None:
    run_id = await _hung_run(harness)
    assert harness.engine is not None and harness.app is not None and harness.store is not None
    queue = TaskQueue(harness.store)
    await queue.start()
    dog = Watchdog(harness.engine, queue, WatchdogConfig(mode=mode), now_ms=_later)  # type: ignore[arg-type]
    try:
        now_clean = Watchdog(harness.engine, queue, WatchdogConfig(mode=mode))  # type: ignore[arg-type]
        assert await now_clean.scan_once() == []  # nothing is stale yet
        [incident] = await dog.scan_once()
        assert (incident.kind, incident.subject_id, incident.severity) == (
            "run_stale", run_id, rules.Severity.HIGH)
        assert await dog.scan_once() == []  # the same stall is reported once
        app = harness.app
        if mode == "auto":
            assert incident.action == "failed"
            async with asyncio.timeout(5):
                while any(rec.run_id == run_id for rec, _ in harness.engine.live_runs()):  # noqa: ASYNC110
                    await asyncio.sleep(0.01)
            got = await app.get_run(USER, pb.GetRunRequest(run_id=run_id))
            assert got.run is not None and got.run.state == pb.RunState.FAILED
            tape = await app.list_run_tape(USER, pb.ListRunTapeRequest(run_id=run_id,
                                                                        after_seq=-1))
            final = tape.events[-1].status
            assert final is not None and final.reason == "watchdog_stale_heartbeat"
        else:
            assert incident.action == "observed"
            assert any(rec.run_id == run_id for rec, _ in harness.engine.live_runs())
        listed = await app.list_incidents(ADMIN, pb.ListIncidentsRequest(open_only=True))
        assert [i.incident_id for i in listed.incidents] == [incident.incident_id]
        acked = await app.acknowledge_incident(ADMIN, pb.AcknowledgeIncidentRequest(
            incident_id=incident.incident_id, note="looking"))
        assert acked.incident is not None and acked.incident.acknowledged_by == "admin:ops"
        assert (await app.list_incidents(ADMIN, pb.ListIncidentsRequest(open_only=True))
                ).incidents == []
        with pytest.raises(PalyraError) as info:
            await app.list_incidents(USER, pb.ListIncidentsRequest())
        assert info.value.code is ErrorCode.PERMISSION_DENIED
        events = [e.kind for e in harness.store.read_range(0, 10_000)]
        assert events.count("watchdog.incident") == 1 and "watchdog.acknowledged" in events
    finally:
        await queue.close()


async def test_a_task_whose_worker_went_quiet_is_requeued(harness: Harness) -> None:
    await harness.start()
    assert harness.engine is not None and harness.store is not None
    queue = TaskQueue(harness.store)
    await queue.start()
    try:
        task, _ = await queue.enqueue("reflect")
        held = await queue.claim("worker:quiet", lease_ms=600_000)
        dog = Watchdog(harness.engine, queue, WatchdogConfig(mode="auto"), now_ms=_later)
        [incident] = await dog.scan_once()
        assert (incident.kind, incident.action) == ("task_stale", "recovered")
        assert queue.require(task.task_id).state == State.QUEUED
        with pytest.raises(PalyraError) as info:
            await queue.succeed(task.task_id, held.lease_epoch)
        assert info.value.code is ErrorCode.LEASE_STALE
    finally:
        await queue.close()


async def test_disabled_does_nothing(harness: Harness) -> None:
    run_id = await _hung_run(harness)
    assert harness.engine is not None and harness.store is not None
    queue = TaskQueue(harness.store)
    await queue.start()
    try:
        dog = Watchdog(harness.engine, queue, WatchdogConfig(mode="disabled"), now_ms=_later)
        assert await dog.scan_once() == []
        assert any(rec.run_id == run_id for rec, _ in harness.engine.live_runs())
    finally:
        await queue.close()


@given(quiet_s=st.floats(0, 1000), phase=st.sampled_from(["idle", "model", "tool", "approval"]),
       pending_s=st.floats(0, 2000))
def test_rules(quiet_s: float, phase: str, pending_s: float) -> None:
    now = 10_000_000
    config = WatchdogConfig()
    found = rules.findings(
        now, [rules.RunView("r", phase, now - int(quiet_s * 1000))],
        [rules.TaskView("t", 3, now - int(quiet_s * 1000))],
        [rules.ApprovalView("a", "r", now - int(pending_s * 1000))], config)
    kinds = {f.kind for f in found}
    stale = int(quiet_s * 1000) > config.stale_after_s * 1000
    assert (rules.Kind.RUN_STALE in kinds) == (stale and phase in ("model", "tool"))
    assert (rules.Kind.TASK_STALE in kinds) == stale
    assert (rules.Kind.APPROVAL_PENDING in kinds) == (
        int(pending_s * 1000) > config.approval_pending_s * 1000)
    assert {f.severity for f in found if f.kind is rules.Kind.APPROVAL_PENDING} <= {
        rules.Severity.MEDIUM}
