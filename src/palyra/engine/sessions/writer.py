"""The write side of sessions: the one locked resolve, and every committed change.

Every read-modify-write of one session record holds that session's lock
(:meth:`SessionWriter.hold`), so unrelated sessions still share group commits.
Get-or-create first holds the selector locks, plans, then holds the session's
lock and plans again (another task may have created or changed it meanwhile):
that protocol lives only in :meth:`SessionWriter.resolving`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import msgspec

from palyra.core.errors import ErrorCode, PalyraError
from palyra.core.ids import is_ulid, new_ulid
from palyra.engine.model.errors import coded, invalid
from palyra.engine.model.lifecycle import is_run_terminal
from palyra.engine.model.records import (
    RUNS,
    SESSIONS,
    IdentityRec,
    RunRecord,
    SessionRecord,
    decode,
    session_index_key,
)
from palyra.engine.sessions.handover import (
    ChangeAnswer,
    SessionChange,
    answer_draft,
    answered,
    applicable,
    dropped_draft,
    expired,
    still_handed,
    withdrawn,
)
from palyra.engine.sessions.locks import KeyedLocks
from palyra.engine.sessions.plan import (
    SessionPlan,
    check_identity,
    plan_resolve,
    record_write,
    session_event,
)
from palyra.engine.sessions.reader import SessionReader
from palyra.engine.sessions.selectors import Selectors
from palyra.journal import EntityWrite, JournalStore, Lease, RowExpectation

POSTURES = frozenset({"always_allow", "ask_each_time", "disabled"})

Consume = Callable[[ChangeAnswer], Sequence[EntityWrite]]
"""The writes that consume a handed-over change, given its answer (none for a local one)."""


async def _never_handed_over(change: SessionChange) -> ChangeAnswer:
    raise AssertionError(f"session {change.session_id} has no other owner on one daemon")


@dataclass(frozen=True, slots=True)
class CleanupResult:
    """Outcome of archiving a session."""

    cleaned: bool
    newly_archived: bool
    previous_session_key: str
    run_count: int


class SessionWriter:
    """Commits session changes under the per-session lock."""

    def __init__(self, store: JournalStore, reader: SessionReader,
                 now_ms: Callable[[], int],
                 fence: Callable[[str], Lease | None] | None = None,
                 owning: Callable[[str], contextlib.AbstractAsyncContextManager[bool]]
                 | None = None,
                 handover: Callable[[SessionChange], Awaitable[ChangeAnswer]] | None = None,
                 ) -> None:
        self._store = store
        self.reader = reader
        self._now_ms = now_ms
        self._locks = KeyedLocks()
        # Several daemons on one journal: the lease this daemon holds on a session,
        # if any. A change to a session it owns is fenced by that lease, so once
        # another daemon took the session over it writes nothing, even unaware.
        self._fence = fence or (lambda _session_id: None)
        # There, a change of an existing session is made only by the session's owner:
        # ``owning(session_id)`` holds the session's lease for the change (claiming it
        # if free, reading what other daemons wrote first) and yields True, or yields
        # False while another live daemon owns the session, and the change is then
        # handed to that owner (``handover``). Nothing of this on LMDB.
        self._owning = owning or (lambda _session_id: contextlib.nullcontext(True))
        self._handover = handover or _never_handed_over

    def hold(self, session_id: str) -> contextlib.AbstractAsyncContextManager[None]:
        """Hold ``session_id``'s lock: the only spelling of that lock's key."""
        return self._locks.hold("sid:" + session_id)

    @asynccontextmanager
    async def resolving(self, identity: IdentityRec,
                        selectors: Selectors) -> AsyncIterator[SessionPlan]:
        """Get-or-create by ``selectors``, holding every lock the plan needs.

        Yields the plan made under the session's lock; the caller commits it
        (alone, or with a run's first events) before leaving the block.
        """
        names = sorted({f"sel:{v}" for v in (selectors.session_id, selectors.session_key,
                                             selectors.label) if v} or {"sel:*new*"})
        async with self._locks.hold_all(names):
            first = plan_resolve(self.reader, identity, selectors, self._now_ms())
            async with self.hold(first.record.session_id):
                # A session this plan creates under an id it minted is unknown to
                # anyone else, and its selectors' locks are held since it was planned:
                # planning again would find the same nothing and mint another id. Any
                # other session is planned again under its lock, where changes wait.
                minted = first.created and not selectors.session_id
                yield first if minted else plan_resolve(
                    self.reader, identity, selectors, self._now_ms())

    async def resolve(self, identity: IdentityRec, selectors: Selectors) -> SessionPlan:
        """Get-or-create (and optionally reset) a session and commit it.

        The reset of an existing session is a change of it like any other: made by
        the session's owner (``_change``), handed over where another daemon owns it.
        """
        async with self.resolving(identity, selectors) as plan:
            if plan.created:
                await self.commit(plan)
            if not plan.reset_applied or plan.created:
                return plan
        answer = await self._change(SessionChange(new_ulid(), plan.record.session_id,
                                                  identity, "reset"))
        return SessionPlan(answer.records[0], reset_applied=True)

    async def commit(self, plan: SessionPlan, fenced_by: str = "",
                     writes: Sequence[EntityWrite] = (),
                     expect: Sequence[RowExpectation] = ()) -> SessionRecord:
        """Commit a plan on its own (API calls that start no run); hold its session's lock.

        ``fenced_by``: the session whose lease fences the commit (default: the
        plan's own), when this daemon holds it. ``writes``: more rows for the same commit;
        ``expect``: rows it stands on (a handed-over change's, still there).

        Raises:
            PalyraError: ``LEASE_STALE`` when another daemon took that session
                over: nothing of the plan is written.
        """
        events = list(plan.events) or [session_event("session.resolved", plan.record, {})]
        events[-1] = events[-1].with_writes(*plan.entity_writes, record_write(plan.record),
                                          *writes)
        await self._store.append(events, fence=self._fence(fenced_by or plan.record.session_id),
                                 expect=expect)
        return plan.record


    # -- changes outside a run (handed to the session's owner where another daemon owns it)
    async def cleanup(self, identity: IdentityRec, session_id: str) -> CleanupResult:
        """Archive: the key becomes ``archived:<id>:<ms>`` and cached decisions go."""
        change = SessionChange(new_ulid(), session_id, identity, "archive")
        answer = await self._change(change)
        return CleanupResult(answer.cleaned, answer.cleaned, answer.previous_session_key,
                             answer.run_count)

    async def branch(self, identity: IdentityRec, session_id: str, label: str,
                     branch_id: str = "") -> tuple[SessionRecord, SessionRecord]:
        """A new session branched from one whose latest run is terminal.

        ``branch_id``: the branch's session id, chosen by the client so a retry (after a
        timeout, say, while the change was handed to the session's owner) finds the branch
        the first request made (answered as made) instead of making a second one.

        Raises:
            InvalidArgument: ``branch_id`` is not a ULID.
            PalyraError: ``STATE_CONFLICT`` when the latest run is still active;
                ``ALREADY_EXISTS`` when a session ``branch_id`` exists that is not this
                caller's branch of ``session_id``.
        """
        if branch_id and not is_ulid(branch_id):
            raise invalid("branch_session_id must be a ULID", field="branch_session_id")
        change = SessionChange(new_ulid(), session_id, identity, "branch", label=label,
                               branch_id=branch_id or new_ulid())
        branch, source = (await self._change(change)).records
        return branch, source

    async def set_posture(self, identity: IdentityRec, session_id: str, tool_name: str,
                          posture: str) -> SessionRecord:
        """Set (or clear, with ``""``) a per-session tool posture."""
        if not tool_name.strip():
            raise invalid("tool_name is required", field="tool_name")
        if posture and posture not in POSTURES:
            raise coded(ErrorCode.INVALID_ARGUMENT, f"unknown posture {posture!r}")
        answer = await self._change(SessionChange(new_ulid(), session_id, identity, "posture",
                                                  tool_name=tool_name, posture=posture))
        return answer.records[0]

    async def _change(self, change: SessionChange) -> ChangeAnswer:
        """Apply ``change`` here where this daemon may own the session, else hand it over.

        Raises:
            PalyraError: the change's own refusal (``NOT_FOUND``, ``STATE_CONFLICT``,
                an identity mismatch...), wherever it was decided; ``UNAVAILABLE``
                (retryable) when the owner did not answer in time.
        """
        async with self._owning(change.session_id) as owned:
            if owned:
                async with self.hold(change.session_id):
                    return await self._apply(change, lambda _answer: ())
        answer = await self._handover(change)
        answer.raise_refusal(change.session_id)
        return answer

    async def apply_handed(self, change: SessionChange, raw: bytes) -> bool:
        """Apply a change another daemon handed over (its row ``raw``), if this daemon can
        own the session.

        The change, its row's deletion and its answer land in one commit (a refusal's
        answer in a commit of its own), each standing on the row as handed over: once its
        asker gave up (deleted the row) nothing of it lands. A change past its deadline is
        dropped unapplied. False: another live daemon owns the session (it applies the
        row), or this daemon lost the session meanwhile.
        """
        async with self._owning(change.session_id) as owned:
            if not owned:
                return False
            expect = (still_handed(change, raw),)
            async with self.hold(change.session_id):
                try:
                    if expired(change, self._now_ms()):  # its asker has stopped waiting
                        await self._store.append([dropped_draft(change)], expect=expect)
                        return True
                    try:
                        await self._apply(change, lambda answer: answered(change, answer),
                                          (applicable(change, raw),))
                    except PalyraError as exc:
                        if exc.code is ErrorCode.LEASE_STALE or withdrawn(change, exc):
                            raise
                        refusal = ChangeAnswer(str(exc.code), exc.message)
                        await self._store.append([answer_draft(change, refusal)],
                                                 expect=expect)
                except PalyraError as exc:
                    if exc.code is ErrorCode.LEASE_STALE:
                        return False  # the session moved: its new owner applies the row
                    if not withdrawn(change, exc):
                        raise
                    # Its asker gave up first (or another owner consumed it): nothing landed.
        return True

    async def _apply(self, change: SessionChange, consume: Consume,
                     expect: Sequence[RowExpectation] = ()) -> ChangeAnswer:
        """Decide and commit ``change`` (this daemon owns the session, under its lock);
        ``consume(answer)``: writes that go into the same commit, which stands on
        ``expect``."""
        record = self.reader.require(change.session_id)
        check_identity(record, change.identity)
        changed: tuple[SessionRecord, ...] = ()  # besides the plan's own record
        if change.kind == "posture":
            plan = self._posture_plan(record, change.tool_name, change.posture)
        elif change.kind == "reset":  # planned again here: the record may have moved on
            plan = plan_resolve(self.reader, change.identity, Selectors(
                session_id=record.session_id, reset=True), self._now_ms())
        elif change.kind == "branch" and (made := self.reader.get(change.branch_id)):
            # A retried branch: the first request made it. Answered as made, nothing written.
            answer = ChangeAnswer(records=(_retried_branch(made, record, change), record))
            if writes := consume(answer):
                await self._store.append([session_event(
                    "session.change_answered", record, {}).with_writes(*writes)],
                    expect=expect)
            return answer
        elif change.kind == "branch":
            plan, source = self._branch_plan(record, change)
            changed = (source,)
        elif record.archived:  # an archive that has nothing to write: answered on its own
            answer = ChangeAnswer(previous_session_key=record.session_key,
                                  run_count=record.run_count, records=(record,))
            if writes := consume(answer):
                await self._store.append([session_event(
                    "session.change_answered", record, {}).with_writes(*writes)],
                    expect=expect)
            return answer
        else:
            plan = self._archive_plan(record)
        # The records as committed: the asker answers with them, not with its entity
        # cache, which may not have followed the owner's commit yet.
        written = (plan.record, *changed)
        answer = ChangeAnswer(cleaned=change.kind == "archive",
                              previous_session_key=record.session_key,
                              run_count=record.run_count, records=written)
        # A branch's commit changes the source's record: fenced by the source's lease.
        await self.commit(plan, fenced_by=record.session_id, writes=consume(answer),
                          expect=expect)
        return answer

    def _archive_plan(self, record: SessionRecord) -> SessionPlan:
        now = self._now_ms()
        archived_key = f"archived:{record.session_id}:{now}"
        new = msgspec.structs.replace(record, session_key=archived_key, archived=True,
                                      grants={}, updated_ms=now)
        plan = SessionPlan(new)
        plan.entity_writes += [
            EntityWrite(SESSIONS, session_index_key(record.session_key), None),
            EntityWrite(SESSIONS, session_index_key(archived_key), record.session_id.encode()),
        ]
        plan.events.append(session_event("session.archived", new, {
            "previous_session_key": record.session_key, "session_key": archived_key}))
        return plan

    def _branch_plan(self, source: SessionRecord,
                     change: SessionChange) -> tuple[SessionPlan, SessionRecord]:
        """The new branch's plan, and the source's record as it changes."""
        if source.last_run_id:
            raw = self._store.get_entity(RUNS, source.last_run_id)
            if raw is not None and not is_run_terminal(decode(RunRecord, raw).state):
                raise coded(ErrorCode.STATE_CONFLICT, "the latest run of the session is "
                            "still active; branch after it ends", session_id=source.session_id,
                            run_id=source.last_run_id)
        now, new_id = self._now_ms(), change.branch_id
        branch = SessionRecord(
            session_id=new_id, session_key=new_id, label=change.label.strip(),
            identity=change.identity, created_ms=now, updated_ms=now,
            branch_state="active_branch", parent_session_id=source.session_id,
            origin_run_id=source.last_run_id, tool_postures=dict(source.tool_postures))
        new_source = msgspec.structs.replace(source, branch_state="branch_source",
                                             updated_ms=now)
        plan = SessionPlan(branch, created=True)
        plan.entity_writes += [
            EntityWrite(SESSIONS, session_index_key(new_id), new_id.encode()),
            record_write(new_source),
        ]
        # The reference tapes a rollback.marker; palyra's tape has no such
        # member, so the branch point is a journal event of the new session.
        plan.events.append(session_event("session.branched", branch, {
            "parent_session_id": source.session_id, "origin_run_id": source.last_run_id}))
        return plan, new_source

    def _posture_plan(self, record: SessionRecord, tool_name: str, posture: str) -> SessionPlan:
        postures = dict(record.tool_postures)
        if posture:
            postures[tool_name] = posture
        else:
            postures.pop(tool_name, None)
        new = msgspec.structs.replace(record, tool_postures=postures, updated_ms=self._now_ms())
        plan = SessionPlan(new)
        plan.events.append(session_event("session.tool_posture", new, {
            "tool_name": tool_name, "posture": posture or "inherit"}))
        return plan


def _retried_branch(made: SessionRecord, source: SessionRecord,
                    change: SessionChange) -> SessionRecord:
    """``made``, the session ``change.branch_id`` names, if it is the branch ``change`` asks
    for (of this source, by this caller): a retry's answer.

    Raises:
        PalyraError: ``ALREADY_EXISTS`` for any other session of that id.
    """
    if made.parent_session_id != source.session_id or made.identity != change.identity:
        raise coded(ErrorCode.ALREADY_EXISTS, f"session {made.session_id} exists and is not "
                    f"this caller's branch of session {source.session_id}",
                    session_id=source.session_id, branch_session_id=made.session_id)
    return made
