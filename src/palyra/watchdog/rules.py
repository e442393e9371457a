"""What the watchdog finds: a pure function of the time and views of runs, tasks, approvals.

Each finding names its subject and a *marker* of the occurrence (a run's last
activity, a task's lease epoch, an approval's id), so the same stall is
reported once however many scans see it, and a later, new stall of the same
subject is a new incident.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from palyra.watchdog.config import WatchdogConfig


class Severity(enum.IntEnum):
    """Mirrors ``palyra.v1.IncidentSeverity``."""

    LOW = 1
    MEDIUM = 2
    HIGH = 3


class Kind(enum.StrEnum):
    """What went stale."""

    RUN_STALE = "run_stale"
    TASK_STALE = "task_stale"
    APPROVAL_PENDING = "approval_pending"


@dataclass(frozen=True, slots=True)
class RunView:
    """A live run: its id, what its step is doing, and its last committed activity."""

    run_id: str
    phase: str  # idle | model | tool | approval
    last_active_ms: int


@dataclass(frozen=True, slots=True)
class TaskView:
    """A leased task: id, lease epoch and last heartbeat."""

    task_id: str
    epoch: int
    heartbeat_ms: int


@dataclass(frozen=True, slots=True)
class ApprovalView:
    """A pending approval and when it was asked for."""

    approval_id: str
    run_id: str
    created_ms: int


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing the watchdog reports."""

    kind: Kind
    subject_id: str
    marker: str
    severity: Severity
    detail: str

    @property
    def key(self) -> str:
        """Identifies this occurrence (dedupes across scans)."""
        return f"{self.kind}/{self.subject_id}/{self.marker}"


def findings(now_ms: int, runs: Iterable[RunView], tasks: Iterable[TaskView],
             approvals: Iterable[ApprovalView], config: WatchdogConfig) -> list[Finding]:
    """Everything stale at ``now_ms``. A run only counts while a step is in flight
    (``model`` or ``tool``): an idle run or one parked on an approval is waiting,
    not stuck."""
    stale_ms = int(config.stale_after_s * 1000)
    pending_ms = int(config.approval_pending_s * 1000)
    out: list[Finding] = []
    for run in runs:
        quiet = now_ms - run.last_active_ms
        if run.phase in ("model", "tool") and quiet > stale_ms:
            out.append(Finding(Kind.RUN_STALE, run.run_id, str(run.last_active_ms),
                               Severity.HIGH,
                               f"run step in {run.phase} with no activity for {quiet // 1000} s "
                               f"(threshold {config.stale_after_s:g} s)"))
    for task in tasks:
        quiet = now_ms - task.heartbeat_ms
        if quiet > stale_ms:
            out.append(Finding(Kind.TASK_STALE, task.task_id, str(task.epoch), Severity.HIGH,
                               f"task lease epoch {task.epoch} without a heartbeat for "
                               f"{quiet // 1000} s (threshold {config.stale_after_s:g} s)"))
    for approval in approvals:
        waited = now_ms - approval.created_ms
        if waited > pending_ms:
            out.append(Finding(Kind.APPROVAL_PENDING, approval.approval_id, "pending",
                               Severity.MEDIUM,
                               f"approval for run {approval.run_id} pending for {waited // 1000} s "
                               f"(threshold {config.approval_pending_s:g} s)"))
    return out
