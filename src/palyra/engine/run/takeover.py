"""Taking sessions over from daemons that died (several daemons on one journal).

The engine of each daemon runs :meth:`Takeover.keep` in the background: every
third of the lease TTL it renews the session leases it holds (stopping, without
a write, the runs of any session another daemon took over meanwhile) and takes
over orphans, sessions whose owner's term ran out with work left: it claims the
lease (a new term fences the old owner out), reads each unfinished run *after*
the claim, and resumes it exactly as start-up recovery does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from palyra.core.errors import ErrorCode, PalyraError
from palyra.engine.model.lifecycle import is_run_terminal
from palyra.engine.model.records import RUNS, RunRecord, decode
from palyra.engine.run.actor import RunActor
from palyra.engine.run.deps import EngineDeps
from palyra.engine.run.recovery import RecoveryReport, recover_one, unfinished_runs
from palyra.engine.sessions.ownership import SessionLeases
from palyra.journal import Lease

_log = logging.getLogger("palyra.engine")


@dataclass(frozen=True, slots=True)
class Takeover:
    """Claims sessions and resumes their runs, on behalf of one engine."""

    deps: EngineDeps
    leases: SessionLeases
    is_live: Callable[[str], bool]
    """Whether this daemon already has (or is starting) an actor for the run id."""
    start: Callable[[RunActor], None]
    """Start a resumed run's actor (it holds the session's lease while it lives)."""
    lose: Callable[[str], None]
    """Stop, without writing, the runs of a session another daemon took over."""
    draining: Callable[[], bool]

    async def take(self, sessions: dict[str, list[str]], report: RecoveryReport) -> None:
        """Claim each session that is free or orphaned and resume its unfinished runs."""
        for session_id, run_ids in sessions.items():
            if self.draining():
                return
            if run_ids and all(self.is_live(r) for r in run_ids):
                continue
            lease = await self.leases.claim(session_id)
            if lease is None:  # a live daemon owns it
                continue
            try:
                for run_id in run_ids:
                    await self._resume(run_id, lease, report)
            finally:
                await self.leases.unhold(session_id)

    async def _resume(self, run_id: str, lease: Lease, report: RecoveryReport) -> None:
        if self.is_live(run_id):
            return
        # Read after the claim: the old owner's writes are fenced out from here on,
        # so this row is the run's last word.
        raw = self.deps.store.get_entity(RUNS, run_id)
        record = decode(RunRecord, raw) if raw is not None else None
        if record is None or is_run_terminal(record.state):
            return
        try:
            actor = await recover_one(self.deps, record, report, fence=lease)
        except PalyraError as exc:
            if exc.code is not ErrorCode.LEASE_STALE:
                raise
            return  # taken over again meanwhile: its new owner resumes it
        self.start(actor)

    async def keep(self) -> None:
        """Renew the leases held; take over orphaned sessions. Runs until cancelled.

        Every third of the TTL: a term is renewed twice before it could run out,
        and a dead owner's sessions are resumed within about 1.3 TTL.
        """
        period = self.leases.ttl_s / 3
        while True:
            await asyncio.sleep(period)
            try:
                await self.round()
            except Exception:  # the database is away: the next round tries again
                _log.warning("session lease round failed", exc_info=True)

    async def round(self) -> None:
        """One renewal and takeover round."""
        for session_id in await self.leases.renew():
            self.lose(session_id)
        if self.draining():
            return
        orphans = await self.leases.orphans()
        if orphans:
            # Only when a daemon died or stopped: one scan of the runs finds theirs.
            found = unfinished_runs(self.deps.store)
            await self.take({s: found.get(s, []) for s in orphans}, RecoveryReport())
