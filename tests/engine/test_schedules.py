"""Scheduled prompts: cron in a time zone across DST, one-off times, each firing one
background_prompt task exactly once across a restart at the firing instant, missed firings
by policy, the firing's run, and the RPCs with Cedar cron.delete."""

from __future__ import annotations

import datetime
import zoneinfo

import msgspec
import pytest
from engine_harness import ADMIN, OTHER_USER, USER, Harness
from palyra_gen.palyra import v1 as pb

from palyra.adapters.scheduled import prompt_handler
from palyra.agents import AgentRegistry
from palyra.channels.outbox import OutboundReply, SendPayload
from palyra.core.errors import ErrorCode, PalyraError
from palyra.schedules import PROMPT_TASK, ScheduleRecord, Schedules, due, next_after, validate
from palyra.schedules.model import LATE_MS
from palyra.tasks import TaskQueue
from palyra.tasks.worker import TaskContext

BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")


def ms(year: int, month: int, day: int, hour: int, minute: int = 0,
       tz: datetime.tzinfo = datetime.UTC) -> int:
    return int(datetime.datetime(year, month, day, hour, minute, tzinfo=tz).timestamp() * 1000)


def firings(rec: ScheduleRecord, start: int, end: int) -> list[str]:
    out, at = [], start
    while (at := next_after(rec, at)) and at < end:
        out.append(datetime.datetime.fromtimestamp(at / 1000, datetime.UTC).strftime(
            "%m-%d %H:%M"))
    return out


def test_a_daily_cron_follows_its_zone_across_both_dst_changes() -> None:
    nine = ScheduleRecord(schedule_id="s", principal="p", prompt="x", cron="0 9 * * *",
                          time_zone="Europe/Berlin")
    # 09:00 in Berlin is 08:00 UTC in winter and 07:00 UTC in summer (CET -> CEST on 29 March).
    assert firings(nine, ms(2026, 3, 27, 12), ms(2026, 3, 31, 0)) == [
        "03-28 08:00", "03-29 07:00", "03-30 07:00"]
    assert firings(nine, ms(2026, 10, 23, 12), ms(2026, 10, 27, 0)) == [
        "10-24 07:00", "10-25 08:00", "10-26 08:00"]
    # 02:30 does not exist on 29 March and happens twice on 25 October: once a day anyway.
    night = ScheduleRecord(schedule_id="s", principal="p", prompt="x", cron="30 2 * * *",
                           time_zone="Europe/Berlin")
    spring = firings(night, ms(2026, 3, 27, 12), ms(2026, 3, 31, 0))
    autumn = firings(night, ms(2026, 10, 23, 12), ms(2026, 10, 27, 0))
    assert len(spring) == 3 and len(autumn) == 3
    assert spring[0] == "03-28 01:30" and spring[2] == "03-30 00:30"
    assert autumn[0] == "10-24 00:30" and autumn[2] == "10-26 01:30"
    assert spring[1].startswith("03-29") and autumn[1].startswith("10-25")


def test_schedules_are_validated() -> None:
    now = ms(2026, 1, 1, 0)
    base = ScheduleRecord(schedule_id="s", principal="p", prompt="hi")
    for bad, field in ((base, "schedule.cron"),  # neither cron nor a time
                       (ScheduleRecord(**{**_fields(base), "cron": "* * *"}), "schedule.cron"),
                       (ScheduleRecord(**{**_fields(base), "cron": "0 9 * * *",
                                          "time_zone": "Mars/Olympus"}), "schedule.time_zone"),
                       (ScheduleRecord(**{**_fields(base), "at_ms": now - 1}),
                        "schedule.at_unix_ms"),
                       (ScheduleRecord(**{**_fields(base), "at_ms": now + 1, "missed": "x"}),
                        "schedule.missed")):
        with pytest.raises(PalyraError) as refused:
            validate(bad, now)
        assert refused.value.code is ErrorCode.INVALID_ARGUMENT
        assert refused.value.details["field"] == field
    one_off = validate(ScheduleRecord(**{**_fields(base), "at_ms": now + 5}), now)
    assert one_off.next_fire_ms == now + 5


def _fields(rec: ScheduleRecord) -> dict[str, object]:
    return {f: getattr(rec, f) for f in rec.__struct_fields__}


def test_missed_firings_collapse_into_one_or_none() -> None:
    hourly = ScheduleRecord(schedule_id="s", principal="p", prompt="x", cron="0 * * * *",
                            next_fire_ms=ms(2026, 5, 1, 10))
    down_until = ms(2026, 5, 1, 13, 20)  # three firings missed
    step = due(hourly, down_until)
    assert step is not None and (step.fire_ms, step.next_fire_ms) == (
        ms(2026, 5, 1, 10), ms(2026, 5, 1, 14))
    skipping = ScheduleRecord(**{**_fields(hourly), "missed": "skip"})
    step = due(skipping, down_until)
    assert step is not None and (step.fire_ms, step.next_fire_ms) == (0, ms(2026, 5, 1, 14))
    # On time (not missed), skip still fires.
    step = due(skipping, ms(2026, 5, 1, 10) + LATE_MS // 2)
    assert step is not None and step.fire_ms == ms(2026, 5, 1, 10)
    assert due(hourly, ms(2026, 5, 1, 9, 59)) is None


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


async def test_a_firing_is_queued_exactly_once_across_a_restart(harness: Harness) -> None:
    clock = Clock(ms(2026, 6, 1, 8, 59))
    await harness.start()
    assert harness.store is not None
    tasks = TaskQueue(harness.store, now_ms=clock)
    await tasks.start()
    schedules = Schedules(harness.store, tasks, now_ms=clock)
    rec = await schedules.create(ScheduleRecord(
        schedule_id="", principal="user:alice", prompt="good morning", cron="0 9 * * *",
        time_zone="UTC"))
    assert rec.next_fire_ms == ms(2026, 6, 1, 9)
    assert await schedules.fire_due() == []
    clock.now = ms(2026, 6, 1, 9)  # the firing instant
    [task_id] = await schedules.fire_due()
    assert await schedules.fire_due() == []
    # A crash right after the firing's commit: a new process sees it fired.
    await tasks.close()
    await harness.restart()
    assert harness.store is not None
    tasks = TaskQueue(harness.store, now_ms=clock)
    await tasks.start()
    schedules = Schedules(harness.store, tasks, now_ms=clock)
    assert await schedules.fire_due() == []
    prompts = list(tasks.page(kind=PROMPT_TASK)[0])
    assert [t.task_id for t in prompts] == [task_id]
    [stored] = schedules.all()
    assert (stored.next_fire_ms, stored.fired_count) == (ms(2026, 6, 2, 9), 1)
    # The same firing queued again (a lost row write) finds its task: idempotent by key.
    again, created = await tasks.enqueue(
        PROMPT_TASK, payload={}, idempotency_key=f"schedule:{rec.schedule_id}:{ms(2026, 6, 1, 9)}")
    assert not created and again.task_id == task_id
    await tasks.close()


async def test_a_firing_runs_the_prompt_once_as_its_creator(harness: Harness) -> None:
    clock = Clock(ms(2026, 6, 1, 9))
    app = await harness.start()
    assert harness.store is not None and harness.engine is not None
    agent = (await app.create_agent(ADMIN, pb.CreateAgentRequest(agent=pb.Agent(
        display_name="morning", system_prompt="Be brief.")))).agent
    assert agent is not None
    tasks = TaskQueue(harness.store, now_ms=clock)
    await tasks.start()
    schedules = Schedules(harness.store, tasks, now_ms=clock)
    rec = await schedules.create(ScheduleRecord(
        schedule_id="", principal="user:alice", prompt="status report please",
        at_ms=clock.now + 1, agent_id=agent.agent_id))
    clock.now += 1
    [task_id] = await schedules.fire_due()
    handle = prompt_handler(harness.engine, AgentRegistry(harness.store), schedules)
    task = tasks.get(task_id)
    assert task is not None
    result = await handle(TaskContext(task=task, payload={"schedule_id": rec.schedule_id}))
    assert result["run_id"] == task_id and result["state"] == "done"
    again = await handle(TaskContext(task=task, payload={"schedule_id": rec.schedule_id}))
    assert again == result  # a retried task finds its run
    run = (await app.get_run(USER, pb.GetRunRequest(run_id=task_id))).run
    assert run.final_text == "status report please" and run.agent_id == agent.agent_id
    listed = (await app.list_runs(USER, pb.ListRunsRequest())).runs
    assert [r.run_id for r in listed] == [task_id]
    [done] = schedules.all()
    assert done.next_fire_ms == 0 and done.fired_count == 1  # a one-off fires once
    await tasks.close()


async def test_a_firings_answer_goes_to_its_channel_conversation(harness: Harness) -> None:
    clock = Clock(ms(2026, 6, 1, 9))
    await harness.start()
    assert harness.store is not None and harness.engine is not None
    tasks = TaskQueue(harness.store, now_ms=clock)
    await tasks.start()
    schedules = Schedules(harness.store, tasks, now_ms=clock)
    with pytest.raises(PalyraError) as half:
        await schedules.create(ScheduleRecord(schedule_id="", principal="user:alice",
                                              prompt="x", at_ms=clock.now + 1, sink="slack:T1"))
    assert half.value.details["field"] == "schedule.conversation_id"
    rec = await schedules.create(ScheduleRecord(
        schedule_id="", principal="user:alice", prompt="daily digest", at_ms=clock.now + 1,
        sink="slack:T1", conversation_id="C42", thread_id="171.5"))
    clock.now += 1
    [task_id] = await schedules.fire_due()
    handle = prompt_handler(harness.engine, AgentRegistry(harness.store), schedules, tasks)
    task = tasks.get(task_id)
    assert task is not None
    for _ in range(2):  # a retried firing sends nothing twice
        await handle(TaskContext(task=task, payload={"schedule_id": rec.schedule_id}))
    [send] = tasks.page(kind="channel.send")[0]
    sent = msgspec.json.decode(send.payload_json, type=SendPayload)
    assert sent.replies() == [OutboundReply(
        sink="slack:T1", key=f"schedule:{task_id}:0", text="daily digest",
        conversation_id="C42", thread_id="171.5")]
    await tasks.close()


async def test_schedule_rpcs_and_cron_delete(harness: Harness) -> None:
    app = await harness.start()
    assert harness.store is not None
    tasks = TaskQueue(harness.store)
    await tasks.start()
    app.schedules = Schedules(harness.store, tasks)
    made = (await app.create_schedule(USER, pb.CreateScheduleRequest(schedule=pb.Schedule(
        cron="0 9 * * MON-FRI", time_zone="Europe/Berlin", prompt="standup")))).schedule
    assert made is not None and made.principal == "user:alice" and made.next_fire_unix_ms > 0
    assert [s.schedule_id for s in (await app.list_schedules(
        USER, pb.ListSchedulesRequest())).schedules] == [made.schedule_id]
    assert (await app.list_schedules(OTHER_USER, pb.ListSchedulesRequest())).schedules == []
    with pytest.raises(PalyraError) as bad:
        await app.create_schedule(USER, pb.CreateScheduleRequest(schedule=pb.Schedule(
            cron="0 9 * * *", prompt="x", agent_id="01J00000000000000000000009")))
    assert bad.value.code is ErrorCode.NOT_FOUND
    # Sensitive by default: its owner may not delete it, an operator may.
    with pytest.raises(PalyraError) as denied:
        await app.delete_schedule(USER, pb.DeleteScheduleRequest(schedule_id=made.schedule_id))
    assert denied.value.code is ErrorCode.PERMISSION_DENIED
    assert (await app.delete_schedule(ADMIN, pb.DeleteScheduleRequest(
        schedule_id=made.schedule_id))).deleted
    assert (await app.list_schedules(ADMIN, pb.ListSchedulesRequest())).schedules == []
    await tasks.close()
