"""The self-healing watchdog: stale runs and tasks, long-pending approvals, incidents.

:mod:`~palyra.watchdog.rules` is pure (what is stale), :mod:`~palyra.watchdog.watchdog`
journals incidents and, in ``auto`` mode, recovers.
"""

from palyra.watchdog.config import WatchdogConfig, WatchdogMode
from palyra.watchdog.watchdog import IncidentRecord, Watchdog, acknowledge, list_incidents

__all__ = ["IncidentRecord", "Watchdog", "WatchdogConfig", "WatchdogMode", "acknowledge",
           "list_incidents"]
