"""The self-healing watchdog: scan, report each stall once, and (in ``auto``) recover it.

Every ``scan_every_s`` it gathers views of the engine's live runs, the task
queue's leased tasks and the pending approvals, asks :func:`rules.findings`
what is stale, and for each new finding journals an incident (in the ``meta``
table, ``incident:<id>``, with a ``watchdog.incident`` event naming what was
done). In ``auto`` mode a stale task's lease is lapsed (re-queued with backoff,
or failed after its last attempt) and a stuck run is failed with the reason
``watchdog_stale_heartbeat``; an approval is only reported (it has its own
timeout). A scan is cheap and runs on a timer: it is not on any hot path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import msgspec

from palyra.core.errors import ErrorCode, NotFound, PalyraError
from palyra.core.ids import new_ulid
from palyra.engine import Engine
from palyra.journal import EntityWrite, EventDraft, JournalStore
from palyra.tasks import TaskQueue
from palyra.watchdog import rules
from palyra.watchdog.config import WatchdogConfig

log = logging.getLogger("palyra.watchdog")
TABLE = "meta"
_INCIDENT = "incident:"
_SEEN = "incident-key:"
ACTOR = "system:watchdog"
STALE_RUN_REASON = "watchdog_stale_heartbeat"


class IncidentRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One incident as stored."""

    incident_id: str
    severity: int
    kind: str
    subject_id: str
    detail: str
    detected_ms: int
    action: str
    action_detail: str = ""
    acknowledged_by: str = ""
    acknowledged_ms: int = 0
    note: str = ""


def list_incidents(store: JournalStore, *, open_only: bool, limit: int) -> list[IncidentRecord]:
    """Newest first (ids are ULIDs)."""
    out: list[IncidentRecord] = []
    after = ""
    while True:
        rows = store.scan_entities(TABLE, _INCIDENT, after, 1000)
        out += [msgspec.msgpack.decode(v, type=IncidentRecord) for _k, v in rows]
        if len(rows) < 1000:
            break
        after = rows[-1][0]
    if open_only:
        out = [r for r in out if not r.acknowledged_by]
    return sorted(out, key=lambda r: r.incident_id, reverse=True)[:limit]


async def acknowledge(store: JournalStore, incident_id: str, by: str, note: str,
                      now_ms: int) -> IncidentRecord:
    """Record who acknowledged an incident (idempotent: the first acknowledgement stays)."""
    raw = store.get_entity(TABLE, _INCIDENT + incident_id) if incident_id else None
    if raw is None:
        raise NotFound(f"no incident {incident_id}", details={"incident_id": incident_id})
    rec = msgspec.msgpack.decode(raw, type=IncidentRecord)
    if rec.acknowledged_by:
        return rec
    rec = msgspec.structs.replace(rec, acknowledged_by=by, acknowledged_ms=now_ms, note=note[:500])
    await store.append([EventDraft(
        kind="watchdog.acknowledged", actor=by, principal=by,
        payload={"incident_id": incident_id, "note": rec.note},
        entity_writes=(EntityWrite(TABLE, _INCIDENT + incident_id,
                                   msgspec.msgpack.encode(rec)),))])
    return rec


class Watchdog:
    """Scans on a timer; :meth:`scan_once` is the whole of one scan."""

    def __init__(self, engine: Engine, tasks: TaskQueue, config: WatchdogConfig, *,
                 now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000) -> None:
        self._engine = engine
        self._store = engine.store
        self._tasks = tasks
        self.config = config
        self._now = now_ms
        self._loop: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start scanning (not in ``disabled`` mode)."""
        if self.config.mode != "disabled" and self._loop is None:
            self._loop = asyncio.ensure_future(self._every())

    async def close(self) -> None:
        """Stop scanning."""
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
            self._loop = None

    async def _every(self) -> None:
        while True:
            await asyncio.sleep(self.config.scan_every_s)
            try:
                await self.scan_once()
            except Exception:
                log.exception("watchdog scan failed")

    def _views(self) -> tuple[list[rules.RunView], list[rules.TaskView],
                              list[rules.ApprovalView]]:
        runs = [rules.RunView(rec.run_id, phase, rec.last_active_ms)
                for rec, phase in self._engine.live_runs()]
        # Heartbeats are stamped on the queue's clock: the database's on a shared journal,
        # where this daemon's own may be wrong; they are put on the watchdog's clock here,
        # so a live lease is judged alive whatever this daemon's clock says.
        shift = self._now() - self._tasks.now_ms() if self._store.shared else 0
        tasks = [rules.TaskView(t.task_id, t.lease_epoch, t.heartbeat_ms + shift)
                 for t in self._tasks.leased()]
        pending, _ = self._engine.approval_reader.scan(
            lambda r: r.state == "pending", "", 10_000)
        approvals = [rules.ApprovalView(a.approval_id, a.run_id, a.created_ms) for a in pending]
        return runs, tasks, approvals

    async def scan_once(self) -> list[IncidentRecord]:
        """One scan: the incidents it raised (each stall once across scans)."""
        if self.config.mode == "disabled":
            return []
        now = self._now()
        raised = []
        for finding in rules.findings(now, *self._views(), self.config):
            if self._store.get_entity(TABLE, _SEEN + finding.key) is not None:
                continue
            action, detail = await self._act(finding)
            rec = IncidentRecord(incident_id=new_ulid(now), severity=int(finding.severity),
                                 kind=str(finding.kind), subject_id=finding.subject_id,
                                 detail=finding.detail, detected_ms=now, action=action,
                                 action_detail=detail)
            await self._store.append([EventDraft(
                kind="watchdog.incident", actor=ACTOR,
                payload={"incident_id": rec.incident_id, "kind": rec.kind,
                         "subject_id": rec.subject_id, "severity": rec.severity,
                         "action": action, "detail": detail},
                entity_writes=(
                    EntityWrite(TABLE, _INCIDENT + rec.incident_id, msgspec.msgpack.encode(rec)),
                    EntityWrite(TABLE, _SEEN + finding.key, rec.incident_id.encode())))])
            log.warning("incident %s %s %s: %s (%s)", rec.incident_id, rec.kind,
                        rec.subject_id, rec.detail, action)
            raised.append(rec)
        return raised

    async def _act(self, finding: rules.Finding) -> tuple[str, str]:
        if self.config.mode != "auto":
            return "observed", ""
        if finding.kind is rules.Kind.TASK_STALE:
            try:
                task = await self._tasks.lapse(finding.subject_id, "watchdog: heartbeat stale")
            except PalyraError as exc:
                return "none", exc.message
            if task.state == "queued":
                return "recovered", "lease lapsed; re-queued"
            return "failed", f"lease lapsed; task {task.state}"
        if finding.kind is rules.Kind.RUN_STALE:
            self._engine.fail_run(finding.subject_id, PalyraError(
                f"the run's step made no progress for over {self.config.stale_after_s:g} s",
                code=ErrorCode.DEADLINE_EXCEEDED), STALE_RUN_REASON)
            return "failed", STALE_RUN_REASON
        return "none", "an approval has its own timeout"
