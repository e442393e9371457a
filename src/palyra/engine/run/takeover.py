"""Claiming sessions, and resuming the runs a previous owner left (several daemons on one journal).

Every claim of a session's lease by this engine goes through :class:`Takeover`,
whoever asks: a new run (or a run handed over by another daemon) about to be
accepted, start-up recovery, and the background sweep that every third of the
lease TTL renews the leases held (stopping, without a write, the runs of any
session another daemon took over meanwhile) and takes over orphans, sessions
whose owner's term ran out with work left.

A claim that starts a new term right after an *unsettled* one (its owner died,
stalled past its term, or stopped with runs parked: ``Lease.previous_owner``)
inherits that owner's unfinished runs, whichever path made the claim: the
sweep no longer lists the session once any claim took it, so the claim that
took it must resume them. What to resume is one pure decision
(:func:`runs_to_resume`) over the claims and the session's unfinished runs,
read *after* the claims (the old owner's writes are fenced out from then on,
so the rows are its last word). Each run is resumed at most once here: a run
this daemon runs, or is accepting or resuming, is never resumed again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from palyra.core.errors import ErrorCode, PalyraError
from palyra.engine.model.lifecycle import is_run_terminal
from palyra.engine.model.records import RUNS, RunRecord, decode
from palyra.engine.run.actor import RunActor
from palyra.engine.run.deps import EngineDeps
from palyra.engine.run.recovery import RecoveryReport, recover_one, unfinished_runs
from palyra.engine.sessions.ownership import Claim, SessionLeases
from palyra.journal import Lease

_log = logging.getLogger("palyra.engine")


def inherits(claim: Claim, recovering: bool) -> bool:
    """Whether ``claim`` must resume its session's unfinished runs.

    A new term after an unsettled one inherits what that owner left. A term
    already held here inherits nothing (its runs live here), nor does one after
    a settled term (that owner's runs had all ended), except at start-up
    recovery (``recovering``), which resumes whatever it finds unfinished.
    """
    return claim.new_term and (recovering or claim.lease.previous_owner != "")


def runs_to_resume(claims: Sequence[Claim], unfinished: Mapping[str, Sequence[str]],
                   recovering: bool, busy: Callable[[str], bool]) -> list[tuple[str, Lease]]:
    """Each run the ``claims`` inherit, with the lease to resume it under.

    ``unfinished``: every non-terminal run id by session, read after the claims.
    ``busy``: runs this daemon already runs, accepts or resumes (never twice).
    """
    return [(run_id, claim.lease) for claim in claims if inherits(claim, recovering)
            for run_id in unfinished.get(claim.session_id, ()) if not busy(run_id)]


@dataclass(slots=True)
class Takeover:
    """Claims sessions and resumes the runs they inherit, on behalf of one engine."""

    deps: EngineDeps
    leases: SessionLeases
    is_live: Callable[[str], bool]
    """Whether this daemon already has (or is accepting) an actor for the run id."""
    start: Callable[[RunActor], None]
    """Start a resumed run's actor (it holds the session's lease while it lives)."""
    lose: Callable[[str], None]
    """Stop, without writing, the runs of a session another daemon took over."""
    draining: Callable[[], bool]
    _resuming: set[str] = field(default_factory=set)

    async def claim(self, session_id: str) -> Lease | None:
        """Hold ``session_id``'s lease for a new run, resuming first what a previous
        owner left; None: a live daemon owns it. Balance with ``leases.unhold``."""
        claim = await self.leases.claim(session_id)
        if claim is None:
            return None
        try:
            await self._inherit([claim], False, RecoveryReport(), "a new run's claim")
        except BaseException:
            self.leases.leave_unsettled(session_id)
            await self.leases.unhold(session_id)
            raise
        return claim.lease

    async def take(self, sessions: Iterable[str], report: RecoveryReport, *,
                   recovering: bool = False) -> None:
        """Claim each session that is free or orphaned and resume the runs it inherits.

        ``recovering``: start-up recovery, which resumes every unfinished run of
        the sessions it claims whatever their previous term.
        """
        claims: list[Claim] = []
        try:
            for session_id in sessions:
                if self.draining():
                    break
                claim = await self.leases.claim(session_id)
                if claim is not None:  # else a live daemon owns it
                    claims.append(claim)
            await self._inherit(claims, recovering, report,
                                "recovery" if recovering else "the orphan sweep")
        except BaseException:
            for claim in claims:
                self.leases.leave_unsettled(claim.session_id)
            raise
        finally:
            for claim in claims:
                await self.leases.unhold(claim.session_id)

    def _busy(self, run_id: str) -> bool:
        return self.is_live(run_id) or run_id in self._resuming

    async def _inherit(self, claims: Sequence[Claim], recovering: bool,
                       report: RecoveryReport, why: str) -> None:
        if not any(inherits(claim, recovering) for claim in claims):
            return  # the usual new run's claim: no scan
        # One scan for every claim, made after them all: whatever an old owner wrote
        # before its term ended is in it, and nothing it writes later lands.
        unfinished = unfinished_runs(self.deps.store)
        inherited = runs_to_resume(claims, unfinished, recovering, self._busy)
        for run_id, lease in inherited:
            # A daemon died, stalled or stopped: worth a line in the log of the one taking over.
            _log.warning("resuming run %s of %s after %s's term (%s)", run_id, lease.name,
                         lease.previous_owner or "no owner", why)
            await self._resume(run_id, lease, report)

    async def _resume(self, run_id: str, lease: Lease, report: RecoveryReport) -> None:
        if self._busy(run_id):
            return  # resumed meanwhile by another claim's resume here
        self._resuming.add(run_id)
        try:
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
        finally:
            self._resuming.discard(run_id)

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
        if orphans:  # only when a daemon died or stopped
            await self.take(orphans, RecoveryReport())
