"""ScheduleService: scheduled prompts (create, list, delete behind Cedar ``cron.delete``)."""

from __future__ import annotations

from palyra_gen.palyra import v1 as pb

from palyra.app._base import AppBase
from palyra.app._convert import identity_of
from palyra.app.context import CallContext
from palyra.core.errors import ErrorCode, InvalidArgument, NotFound, PalyraError, PermissionDenied
from palyra.core.principals import is_operator
from palyra.schedules import ScheduleRecord, Schedules


def schedule_proto(r: ScheduleRecord) -> pb.Schedule:
    """The wire form of a schedule."""
    return pb.Schedule(schedule_id=r.schedule_id, cron=r.cron, time_zone=r.time_zone,
                       at_unix_ms=r.at_ms, agent_id=r.agent_id, session_key=r.session_key,
                       prompt=r.prompt, missed=r.missed, next_fire_unix_ms=r.next_fire_ms,
                       principal=r.principal, created_at_unix_ms=r.created_ms,
                       fired_count=r.fired_count, sink=r.sink,
                       conversation_id=r.conversation_id, thread_id=r.thread_id)


class SchedulesApi(AppBase):
    """The ScheduleService group."""

    schedules: Schedules | None = None

    def _schedules(self) -> Schedules:
        if self.schedules is None:
            raise PalyraError("scheduled prompts are not running in this process",
                              code=ErrorCode.UNAVAILABLE)
        return self.schedules

    async def create_schedule(self, ctx: CallContext,
                              request: pb.CreateScheduleRequest) -> pb.CreateScheduleResponse:
        """A schedule whose runs run as the caller."""
        identity = identity_of(ctx)
        s = request.schedule
        if s is None:
            raise InvalidArgument("schedule is required", details={"field": "schedule"})
        if s.agent_id:
            self._agent_registry.require(s.agent_id)
        rec = await self._schedules().create(ScheduleRecord(
            schedule_id="", principal=identity.principal, device_id=identity.device_id,
            prompt=s.prompt, cron=s.cron.strip(), time_zone=s.time_zone.strip(),
            at_ms=s.at_unix_ms, agent_id=s.agent_id, session_key=s.session_key,
            missed=s.missed or "run_once", sink=s.sink.strip(),
            conversation_id=s.conversation_id, thread_id=s.thread_id))
        return pb.CreateScheduleResponse(schedule=schedule_proto(rec))

    async def list_schedules(self, ctx: CallContext,
                             request: pb.ListSchedulesRequest) -> pb.ListSchedulesResponse:
        """The caller's schedules (an operator's: everyone's)."""
        identity = identity_of(ctx)
        everyone = is_operator(identity.principal)
        return pb.ListSchedulesResponse(schedules=[
            schedule_proto(r) for r in self._schedules().all()
            if everyone or r.principal == identity.principal])

    async def delete_schedule(self, ctx: CallContext,
                              request: pb.DeleteScheduleRequest) -> pb.DeleteScheduleResponse:
        """Remove a schedule if Cedar ``cron.delete`` allows it."""
        identity = identity_of(ctx)
        schedules = self._schedules()
        rec = schedules.get(request.schedule_id)
        if rec is None or (rec.principal != identity.principal
                           and not is_operator(identity.principal)):
            raise NotFound(f"no schedule {request.schedule_id}",
                           details={"schedule_id": request.schedule_id})
        allowed, reason = self.engine.policy.cron_delete(identity, rec.schedule_id,
                                                         owner=rec.principal)
        if not allowed:
            raise PermissionDenied(reason, details={"schedule_id": rec.schedule_id})
        await schedules.delete(rec.schedule_id, identity.principal)
        return pb.DeleteScheduleResponse(deleted=True)
