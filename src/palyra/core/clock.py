"""The clock of instants that daemons judge: this daemon's, or on a shared journal the
database's (the task queue's and the engine's: leases, deadlines, approvals' expiry, a
run's idleness).

A task's lease, ``not_before`` and ``expires_at`` are instants stamped by one daemon
and judged by another (a lease is lapsed, and the task taken again, by whichever
daemon's timer sees it first). Judged on each daemon's own wall clock, a daemon whose
clock runs ahead would take live leases from their workers, and one that runs behind
would leave dead ones held. On a shared journal every daemon reads the instants on the
database server's clock instead: this daemon's clock plus the offset last measured
against the server's, measured again every ``RESYNC_MS`` and whenever this daemon's
clock stepped (it disagrees with the monotonic clock about the time elapsed), so one
query every few seconds keeps every daemon on the server's time whatever its own says.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger("palyra.clock")

RESYNC_MS = 10_000
"""How long an offset to the server's clock is trusted."""

STEP_MS = 50
"""How far this daemon's clock may move apart from its monotonic clock before the
offset is measured again (a step of the wall clock: NTP, an operator)."""


def wall_ms() -> int:
    """Milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    """Milliseconds on a clock that never steps."""
    return time.monotonic_ns() // 1_000_000


def offset_ms(before_ms: int, server_ms: int, after_ms: int) -> int:
    """What to add to this daemon's clock to read the server's: its reading taken
    between ``before_ms`` and ``after_ms`` of this clock is put at their middle."""
    return server_ms - (before_ms + after_ms) // 2


def stale(synced_local_ms: int, synced_mono_ms: int, local_ms: int, mono_ms: int) -> bool:
    """Whether an offset measured at ``synced_*`` must be measured again now: it is
    older than ``RESYNC_MS``, or the local clock stepped since (it moved more or less
    than the monotonic clock did)."""
    elapsed = local_ms - synced_local_ms
    return (not 0 <= elapsed < RESYNC_MS
            or abs(elapsed - (mono_ms - synced_mono_ms)) > STEP_MS)


class ServerClock:
    """Milliseconds on the server's clock (``server_ms``; None: there is none, the local
    clock is it), read through ``local_ms``."""

    def __init__(self, server_ms: Callable[[], int | None], local_ms: Callable[[], int] = wall_ms,
                 mono_ms: Callable[[], int] = monotonic_ms) -> None:
        self._server = server_ms
        self._local = local_ms
        self._mono = mono_ms
        self._offset: int | None = None
        self._synced_local = 0
        self._synced_mono = 0
        self.syncs = 0  # how often the server was asked

    def __call__(self) -> int:
        local, mono = self._local(), self._mono()
        if self._offset is None or stale(self._synced_local, self._synced_mono, local, mono):
            before = self._local()
            try:
                server = self._server()
            except Exception:
                if self._offset is None:
                    raise  # nothing to read the server's time with yet
                # The last offset stands until the server answers again (the commits
                # that would use this reading fail the same way meanwhile).
                log.warning("reading the database's clock failed", exc_info=True)
                self._synced_local, self._synced_mono = local, mono
                return local + self._offset
            after = self._local()
            self._offset = 0 if server is None else offset_ms(before, server, after)
            self._synced_local, self._synced_mono = after, self._mono()
            self.syncs += 1
            local = after
        return local + self._offset


class ClockedStore(Protocol):
    """What :func:`store_clock` needs of a journal store (``JournalStore`` has it)."""

    @property
    def shared(self) -> bool: ...

    def database_time_ms(self) -> int | None: ...


def store_clock(store: ClockedStore, local_ms: Callable[[], int] = wall_ms
                ) -> Callable[[], int]:
    """The clock to stamp and judge instants on with ``store``: the database's, read
    through ``local_ms``, when other daemons share the journal (PostgreSQL); else
    ``local_ms`` itself (LMDB: this daemon is the only one to judge them)."""
    return ServerClock(store.database_time_ms, local_ms) if store.shared else local_ms
