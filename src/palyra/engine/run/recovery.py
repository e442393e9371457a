"""Start-up recovery: no run is ever left stuck.

Every non-terminal run is rebuilt from its tape (the same fold the live loop
uses) and handed to a fresh actor, which continues from the last journaled
step: a pending approval is waited on again (still decidable from any
client), a finished tool result feeds the next model call, an interrupted
model call is simply asked again (it has no side effects). A tool that was
allowed but has no result may or may not have run: read-only tools run again,
others fail the run with reason ``daemon_restarted``.

Tape payloads are stored redacted, so a tool call whose arguments held a
secret comes back with ``<redacted>`` in them. The exact arguments are gone by
design (no secret is ever journaled), so such a call is refused with a denial
result the model sees, never executed with the placeholder (``run.toolflow``).

Runs driven by a RunStream lost their stream with the old process; they are
marked complete-on-idle so they finish their work and end ``done`` instead of
waiting forever for a half-close that cannot come. API runs stay open for
more input, but not forever: the idle-run policy
(``EngineConfig.idle_complete_s``) completes them once idle past the deadline
derived from their journaled ``last_active_ms`` — immediately at recovery if
it already passed while the daemon was down.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from palyra.engine.model.fold import LoopState, ProposalPhase
from palyra.engine.model.lifecycle import RunStateId, is_run_terminal
from palyra.engine.model.records import RUNS, RunRecord, decode
from palyra.engine.model.tape import ENGINE_ACTOR, member_from
from palyra.engine.run.actor import RunActor
from palyra.engine.run.deps import EngineDeps
from palyra.engine.run.writer import RunWriter
from palyra.journal import EventDraft, JournalStore, Lease

_PAGE = 1000


@dataclass(slots=True)
class RecoveryReport:
    """What recovery found, by run id."""

    resumed: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    idle: list[str] = field(default_factory=list)


def rebuild(deps: EngineDeps, run_id: str) -> LoopState:
    """Fold a run's whole tape into a fresh ``LoopState``."""
    loop = LoopState()
    after = -1
    while True:
        page = deps.store.read_tape(run_id, after, _PAGE)
        for event in page.events:
            # The tape holds what the journal stored: redacted. A proposal whose
            # arguments lost a secret is marked so it is refused, not run.
            loop.apply(member_from(event.kind, event.payload), redacted=bool(event.redactions))
            after = event.tape_seq
        if page.next_after_seq is None:
            return loop


def live_run_ids(store: JournalStore) -> frozenset[str]:
    """Every run that is not terminal: retention keeps their whole tapes.

    A run in progress or waiting for approval is folded from tape seq 0 by
    recovery, so none of its events may be pruned.
    """
    live: set[str] = set()
    after = ""
    while True:
        rows = store.scan_entities(RUNS, "", after, _PAGE)
        for key, value in rows:
            after = key
            record = decode(RunRecord, value)
            if not is_run_terminal(record.state):
                live.add(record.run_id)
        if len(rows) < _PAGE:
            return frozenset(live)


def unfinished_runs(store: JournalStore) -> dict[str, list[str]]:
    """Every non-terminal run's id, by session id (what start-up recovery resumes)."""
    sessions: dict[str, list[str]] = {}
    after = ""
    while True:
        rows = store.scan_entities(RUNS, "", after, _PAGE)
        for key, value in rows:
            after = key
            record = decode(RunRecord, value)
            if not is_run_terminal(record.state):
                sessions.setdefault(record.session_id, []).append(record.run_id)
        if len(rows) < _PAGE:
            return sessions


async def recover_runs(deps: EngineDeps) -> tuple[RecoveryReport, list[RunActor]]:
    """Rebuild every non-terminal run; return actors ready to be started."""
    report = RecoveryReport()
    actors: list[RunActor] = []
    after = ""
    while True:
        rows = deps.store.scan_entities(RUNS, "", after, _PAGE)
        for key, value in rows:
            after = key
            record = decode(RunRecord, value)
            if is_run_terminal(record.state):
                continue
            actors.append(await recover_one(deps, record, report))
        if len(rows) < _PAGE:
            return report, actors


async def recover_one(deps: EngineDeps, record: RunRecord, report: RecoveryReport,
                      fence: Lease | None = None) -> RunActor:
    """Rebuild ``record``'s run from its tape, journal ``run.recovered``, return its actor.

    ``fence``: the session lease under which this daemon resumes the run (several
    daemons on one journal); the recovery commit and every later one carry it.

    Raises:
        PalyraError: ``LEASE_STALE`` when ``fence`` was taken over meanwhile.
    """
    loop = rebuild(deps, record.run_id)
    loop.state = record.state
    unknown = frozenset(p.proposal_id for p in loop.proposals
                        if p.phase is ProposalPhase.ALLOWED)
    writer = RunWriter(deps.store, record, loop, deps.now_ms, fence)
    batch = writer.batch().events(EventDraft(
        kind="run.recovered", actor=ENGINE_ACTOR, session_id=record.session_id,
        run_id=record.run_id, payload={"state": record.state, "tape_len": loop.tape_len,
                                       "unknown_inflight": sorted(unknown)},
        principal=record.identity.principal, device_id=record.identity.device_id,
        channel=record.identity.channel))
    # The restart is not activity: the idle-run deadline keeps counting from
    # the last journaled activity, so a run idle before the restart completes
    # on time after it (at once if already past; ``RunActor._idle_wait_s``).
    batch.set(last_active_ms=record.last_active_ms or record.updated_ms)
    if record.driver == "stream":
        batch.set(complete_requested=True)
    await batch.commit()
    if record.state == RunStateId.WAITING_FOR_APPROVAL:
        report.waiting.append(record.run_id)
    elif loop.loop_active or record.pending_inputs:
        report.resumed.append(record.run_id)
    else:
        report.idle.append(record.run_id)
    return RunActor(deps, writer, unknown)
