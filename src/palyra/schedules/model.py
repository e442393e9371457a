"""Scheduled prompts as data: the record, the next firing, what is due now (pure).

Cron expressions are evaluated by ``cronsim`` in the schedule's IANA time zone:
a wall-clock time a DST change skips fires once right after the gap, a
wall-clock time it repeats fires once (as Debian's cron does). Firing times
are stored as UTC milliseconds, so nothing depends on the host's zone.
"""

from __future__ import annotations

import dataclasses
import datetime
import zoneinfo

import msgspec
from cronsim import CronSim, CronSimError

from palyra.core.errors import InvalidArgument

MISSED_POLICIES = frozenset({"run_once", "skip"})
# A firing due longer ago than this when the scheduler sees it was missed (the
# daemon was down): ``run_once`` runs it once, ``skip`` only moves on.
LATE_MS = 60_000
MAX_PROMPT = 16_000


class ScheduleRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One schedule as stored (``meta`` table, ``schedule:<id>``)."""

    schedule_id: str
    principal: str
    device_id: str = ""
    prompt: str
    cron: str = ""
    time_zone: str = ""
    at_ms: int = 0
    agent_id: str = ""
    session_key: str = ""
    missed: str = "run_once"
    next_fire_ms: int = 0
    created_ms: int = 0
    fired_count: int = 0
    last_fire_ms: int = 0
    # Where a firing's answer also goes (the channel outbox); "" for nowhere.
    sink: str = ""
    conversation_id: str = ""
    thread_id: str = ""


def zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA zone (UTC for ""), or ``INVALID_ARGUMENT``."""
    try:
        return zoneinfo.ZoneInfo(name or "UTC")
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidArgument(f"unknown time zone {name!r}",
                              details={"field": "schedule.time_zone"}) from exc


def next_after(rec: ScheduleRecord, after_ms: int) -> int:
    """The first firing strictly after ``after_ms`` (UTC ms); 0 for none (a past one-off)."""
    if not rec.cron:
        return rec.at_ms if rec.at_ms > after_ms else 0
    tz = zone(rec.time_zone)
    start = datetime.datetime.fromtimestamp(after_ms / 1000, tz)
    fire = next(iter(CronSim(rec.cron, start)))
    return int(fire.timestamp() * 1000)


def validate(rec: ScheduleRecord, now_ms: int) -> ScheduleRecord:
    """The record with its first firing, or ``INVALID_ARGUMENT`` naming the field."""
    if not rec.prompt.strip() or len(rec.prompt) > MAX_PROMPT:
        raise InvalidArgument(f"prompt must be 1..{MAX_PROMPT} characters",
                              details={"field": "schedule.prompt"})
    if bool(rec.cron) == bool(rec.at_ms):
        raise InvalidArgument("a schedule has a cron expression or a one-off time, not both",
                              details={"field": "schedule.cron"})
    if rec.sink and not rec.conversation_id:
        raise InvalidArgument("a schedule with a sink needs its conversation_id",
                              details={"field": "schedule.conversation_id"})
    if rec.missed not in MISSED_POLICIES:
        raise InvalidArgument("missed must be run_once or skip",
                              details={"field": "schedule.missed"})
    if rec.cron:
        zone(rec.time_zone)
        try:
            CronSim(rec.cron, datetime.datetime.now(datetime.UTC))
        except CronSimError as exc:
            raise InvalidArgument(f"bad cron expression {rec.cron!r}: {exc}",
                                  details={"field": "schedule.cron"}) from exc
    elif rec.at_ms <= now_ms:
        raise InvalidArgument("at_unix_ms is in the past", details={"field": "schedule.at_unix_ms"})
    return msgspec.structs.replace(rec, next_fire_ms=next_after(rec, now_ms - 1))


@dataclasses.dataclass(frozen=True, slots=True)
class Due:
    """What to do for a schedule now: fire (at ``fire_ms``) or not, and the next firing."""

    fire_ms: int  # 0: nothing to run now
    next_fire_ms: int


def due(rec: ScheduleRecord, now_ms: int) -> Due | None:
    """None when nothing is due; otherwise the firing to run (if any) and the next one.

    Firings missed while the daemon was down collapse into one: ``run_once`` runs
    the earliest missed one, ``skip`` runs none; either way the next firing is the
    first one after ``now_ms``.
    """
    if not rec.next_fire_ms or rec.next_fire_ms > now_ms:
        return None
    late = now_ms - rec.next_fire_ms > LATE_MS
    fire = 0 if late and rec.missed == "skip" else rec.next_fire_ms
    return Due(fire, next_after(rec, max(now_ms, rec.next_fire_ms)))
