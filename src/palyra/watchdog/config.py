"""The watchdog's settings (``[watchdog]`` in TOML, ``PALYRA_WATCHDOG_*`` in the env)."""

from __future__ import annotations

import dataclasses
from typing import Literal, TypeAlias

WatchdogMode: TypeAlias = Literal["disabled", "observe_only", "auto"]


@dataclasses.dataclass(frozen=True, slots=True)
class WatchdogConfig:
    """How the self-healing watchdog behaves.

    Attributes:
        mode: ``observe_only`` (default) raises incidents; ``auto`` also recovers
            what it found (re-queues a stale task, fails a stuck run with a
            reason); ``disabled`` does nothing.
        stale_after_s: A run step or a task lease with no heartbeat for longer is
            stale (a High incident).
        approval_pending_s: An approval pending longer is a Medium incident. Must
            be shorter than ``engine.approval_timeout_s`` (else approvals time
            out first and the incident never fires; the config refuses that).
        scan_every_s: Time between scans.
    """

    mode: WatchdogMode = "observe_only"
    stale_after_s: float = 120.0
    approval_pending_s: float = 120.0
    scan_every_s: float = 15.0
