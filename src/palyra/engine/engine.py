"""The engine: starts, feeds, cancels, recovers and parks runs.

``Engine`` is an async context manager owning one TaskGroup; every run actor
(and any helper task the application spawns, e.g. a RunStream input pump)
lives in it, so nothing outlives the engine and no task is leaked.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import msgspec
import structlog

from palyra.core.clock import store_clock
from palyra.core.errors import AlreadyExists, ErrorCode, PalyraError, PermissionDenied
from palyra.core.ids import is_ulid, new_ulid
from palyra.core.principals import is_operator
from palyra.core.references import parse_references
from palyra.core.trace_ids import run_trace_id, trace_hex
from palyra.engine.model.approvals import Decision
from palyra.engine.model.config import EngineConfig
from palyra.engine.model.errors import as_palyra_error, coded, invalid, not_found
from palyra.engine.model.fold import LoopState
from palyra.engine.model.lifecycle import (
    ApprovalEvent,
    ApprovalStateId,
    RunEvent,
    RunStateId,
    is_run_terminal,
)
from palyra.engine.model.ports import ContextPort, PolicyPort, ToolsPort
from palyra.engine.model.records import (
    RUNS,
    ApprovalRecord,
    AttachmentRec,
    IdentityRec,
    InputRec,
    RunRecord,
    SessionRecord,
    decode,
    redacted,
)
from palyra.engine.run.actor import RunActor
from palyra.engine.run.answer_sweep import MARGIN_S, AnswerSweep
from palyra.engine.run.approvals import ApprovalReader
from palyra.engine.run.attachments import AttachmentStore
from palyra.engine.run.cascade import cancelling_descendants, child_index_write, child_runs
from palyra.engine.run.deps import EndContributor, EngineDeps
from palyra.engine.run.inbox import (
    InboxReader,
    RelayedMessage,
    RelayedStart,
    await_input_answer,
    message_draft,
    start_draft,
)
from palyra.engine.run.recovery import RecoveryReport, recover_runs, unfinished_runs
from palyra.engine.run.relay import relay_decision
from palyra.engine.run.takeover import Takeover
from palyra.engine.run.writer import EndRider, RunWriter
from palyra.engine.sessions.handover import ChangeAnswer, SessionChange, hand_over
from palyra.engine.sessions.ownership import SessionLeases
from palyra.engine.sessions.plan import SessionPlan, record_write
from palyra.engine.sessions.reader import SessionReader
from palyra.engine.sessions.selectors import Selectors
from palyra.engine.sessions.writer import SessionWriter
from palyra.journal import EntityWrite, EventDraft, JournalStore, Lease
from palyra.providers import ModelProvider, ProviderConfig, ProviderRegistry
from palyra.usage import UsageLedger

CANCEL_COMMAND = "/cancel"

_log = logging.getLogger("palyra.engine")


def wall_ms() -> int:
    """Milliseconds since the epoch (the engine's default clock)."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class StartRun:
    """What starts a run: session selectors, the first input, and how it ends."""

    selectors: Selectors
    text: str | None = None
    attachments: tuple[AttachmentRec, ...] = ()
    run_id: str = ""
    driver: str = "api"
    complete: bool = False
    agent_id: str = ""
    agent_postures: Mapping[str, str] = dataclasses.field(default_factory=dict)
    model_route: tuple[str, ...] = ()
    response_cache: bool = False
    parent_run_id: str = ""
    delegation_depth: int = 0
    token_budget: int = 0
    # Entity writes of the run's first commit (a delegation's index row).
    writes: tuple[EntityWrite, ...] = ()
    handed_over: bool = False
    """Handed over by another daemon (``run.inbox``): started here or not at all."""
    end_rider: EndRider | None = None
    """Asked for drafts that commit with the run's end (``RunWriter.end_rider``); a start
    handed over to another daemon carries none (what rides is committed on its own)."""
    minted: bool = False
    """``run_id`` was minted by this process with ``new_ulid()`` just now, so it is
    free: no read of the store to check (that read would wait for LMDB to hold
    the last commit)."""


@dataclass(frozen=True, slots=True)
class Started:
    """A started run and the session it runs in."""

    run: RunRecord
    session: SessionRecord
    session_created: bool
    reset_applied: bool


SubjectDecider = Callable[[ApprovalRecord, Decision], Awaitable[ApprovalRecord]]
"""Decides a run-less approval: commits the decided record (and its effect), returns it."""


def may_access(identity: IdentityRec, owner: IdentityRec) -> bool:
    """Owners see their runs; operators (``palyra.core.principals``) see all."""
    return identity.principal == owner.principal or is_operator(identity.principal)


class Engine:
    """Runs, approvals and recovery over one journal store."""

    def __init__(self, store: JournalStore, provider: ModelProvider, policy: PolicyPort,
                 tools: ToolsPort, config: EngineConfig | None = None, *,
                 now_ms: Callable[[], int] = wall_ms,
                 context: ContextPort | None = None,
                 models: ProviderRegistry | None = None,
                 usage: UsageLedger | None = None,
                 leases: SessionLeases | None = None) -> None:
        self.config = config or EngineConfig()
        # Instants other daemons judge (an approval's expiry, a run's last activity, a
        # session change) are stamped on the database's clock when the journal is
        # shared, so daemons whose own clocks disagree still agree on them.
        now_ms = store_clock(store, now_ms)
        if models is None:
            # One provider serves every run, under its own name.
            models = ProviderRegistry([(ProviderConfig(name=provider.name), provider)])
        self.store = store
        #: Committed session records (get, by key or label, caller-scoped pages).
        self.session_reader = SessionReader(store)
        #: Every session change, each under that session's lock.
        self.session_writer = SessionWriter(store, self.session_reader, now_ms,
                                            leases.fence if leases is not None else None,
                                            self._owning_session if leases is not None else None,
                                            self._hand_change_over if leases is not None else None)
        #: Committed approval records (get, filtered pages).
        self.approval_reader = ApprovalReader(store)
        #: Attachments by SHA-256, kept while a run's tape names them.
        self.attachments = AttachmentStore(store, now_ms)
        self._deps = EngineDeps(store=store, provider=provider, models=models,
                                usage=usage or UsageLedger(store), policy=policy, tools=tools,
                                config=self.config, session_reader=self.session_reader,
                                session_writer=self.session_writer,
                                approval_reader=self.approval_reader, now_ms=now_ms,
                                attachments=self.attachments,
                                context=context, cascade=self._cancelling_descendants,
                                shared_journal=leases is not None)
        self._actors: dict[str, RunActor] = {}
        # Run ids this engine is accepting now, each with its accept's settling (a start
        # of the same id waits for it: see ``start_run``).
        self._claimed: dict[str, asyncio.Future[None]] = {}
        self._stack = AsyncExitStack()
        self._tg: asyncio.TaskGroup | None = None
        self._draining = False
        self._helpers: set[asyncio.Task[None]] = set()
        # Each actor's owning task (``_start_actor``): draining waits for them to
        # finish their after-run work (a session lease released), not just the actor.
        self._owning: set[asyncio.Task[None]] = set()
        self._run_end_hooks: list[Callable[[RunRecord], Awaitable[None]]] = []
        self._subject_deciders: dict[str, SubjectDecider] = {}
        #: Several daemons on one journal: the sessions this one owns (None: it owns all).
        self.leases = leases
        # Every claim of a session's lease goes through it (resuming what an
        # unsettled previous term left): new runs, recovery and the takeover sweep.
        self._takeover = Takeover(
            self._deps, leases, lambda run_id: run_id in self._actors or run_id in self._claimed,
            self._start_actor, self._lost_session, lambda: self._draining,
        ) if leases is not None else None

    # -- lifetime ----------------------------------------------------------
    async def __aenter__(self) -> Engine:
        self._tg = await self._stack.enter_async_context(asyncio.TaskGroup())
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.drain()
        # Parked actors have returned; helpers still running (a RunStream input
        # pump whose client is still connected) are cancelled, so leaving the
        # engine never waits on a client.
        for task in list(self._helpers):
            task.cancel()
        self._tg = None
        await self._stack.__aexit__(exc_type, exc, tb)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``coro`` in the engine's TaskGroup (the caller cancels it when done)."""
        if self._tg is None:
            coro.close()
            raise coded(ErrorCode.UNAVAILABLE, "the engine is not running")
        task = self._tg.create_task(coro)
        self._helpers.add(task)
        task.add_done_callback(self._helpers.discard)
        return task

    @property
    def policy(self) -> PolicyPort:
        """The policy gate the engine asks (other Cedar actions of the app use it too)."""
        return self._deps.policy

    def tool_names(self) -> list[str]:
        """Every tool the model could be offered."""
        return [spec.name for spec in self._deps.tools.catalog()]

    @property
    def provider(self) -> ModelProvider:
        """The configured model provider (background work asks it too)."""
        return self._deps.provider

    def child_runs(self, run_id: str, limit: int = 1000) -> list[str]:
        """Runs ``run_id`` delegated to, in index order (the delegation index)."""
        return child_runs(self.store, run_id, limit)

    @staticmethod
    def child_index_write(parent_run_id: str, child_run_id: str) -> EntityWrite:
        """The index row a child run's first commit carries."""
        return child_index_write(parent_run_id, child_run_id)

    def run_ending(self, run_id: str) -> bool:
        """A live run was asked to end (cancel, failure, its parent's cascade): its
        delegated children end in its ending append, so no one else ends them."""
        actor = self._actors.get(run_id)
        return actor is not None and actor.ending

    @property
    def draining(self) -> bool:
        """The daemon is stopping: runs are being parked, not ended."""
        return self._draining

    @property
    def usage(self) -> UsageLedger:
        """Model usage: the sums and the budgets."""
        return self._deps.usage

    @property
    def models(self) -> ProviderRegistry:
        """Every configured provider by name (runs' routes resolve through it)."""
        return self._deps.models

    def live_runs(self) -> list[tuple[RunRecord, str]]:
        """Every run with an actor in this process: its committed record and what its
        step is doing (``idle``, ``model``, ``tool`` or ``approval``)."""
        return [(actor.record, actor.phase) for actor in list(self._actors.values())]

    def on_run_terminal(self, contributor: EndContributor) -> None:
        """Let ``contributor`` add drafts to the commit that ends a live run failed or
        cancelled (same append: the effect is durable exactly when its cause is)."""
        self._deps.end_contributors.append(contributor)

    def _cancelling_descendants(self, record: RunRecord, event: str
                                ) -> AbstractAsyncContextManager[Sequence[EventDraft]]:
        return cancelling_descendants(self._deps, self._actors, record, event)

    def on_subject_approval(self, subject_prefix: str, decide: SubjectDecider) -> None:
        """Route decisions on run-less approvals whose subject starts with ``subject_prefix``
        (``dm_pairing:``) to ``decide``, which commits the decided record and its effect
        in one append and returns the record."""
        self._subject_deciders[subject_prefix] = decide

    def on_run_end(self, hook: Callable[[RunRecord], Awaitable[None]]) -> None:
        """Call ``hook`` with the record of every run that reaches a terminal state
        in this process (e.g. to cancel the run's background tasks). A failing hook
        is logged; it never affects the run."""
        self._run_end_hooks.append(hook)

    def _start_actor(self, actor: RunActor) -> None:
        self._actors[actor.run_id] = actor
        leases = self.leases
        session_id = actor.record.session_id
        if leases is not None:
            leases.hold(session_id)  # the caller's claim holds it now; this one lasts the run

        async def own() -> None:
            try:
                await actor.main()
            finally:
                self._actors.pop(actor.run_id, None)
                if leases is not None:
                    # A run parked (drain, lost lease) is left for another daemon.
                    await leases.unhold(session_id,
                                        settled=is_run_terminal(actor.record.state))
            record = actor.record
            if is_run_terminal(record.state):
                for hook in self._run_end_hooks:
                    try:
                        await hook(record)
                    except Exception:
                        _log.exception("run-end hook failed for %s", record.run_id)

        task = self.spawn(own())
        self._owning.add(task)
        task.add_done_callback(self._owning.discard)

    async def recover(self) -> RecoveryReport:
        """Resume or fail every non-terminal run (call once, before serving).

        With session leases (several daemons on one journal) only the runs of
        sessions this daemon can own: free ones, and those whose owner's term ran
        out. From then on a background loop renews the leases held and takes over
        the sessions of daemons that died (``run.takeover``).
        """
        takeover = self._takeover
        if takeover is None:
            report, actors = await recover_runs(self._deps)
            for actor in actors:
                self._start_actor(actor)
            return report
        answers = AnswerSweep(self.store, 2 * self._lease_ttl_s() + 5 + MARGIN_S)
        self.spawn(InboxReader(self.store, self._actors.get, self._start_relayed,
                               self.session_writer.apply_handed, answers.maybe,
                               self._deps.now_ms).keep())
        report = RecoveryReport()
        await takeover.take(unfinished_runs(self.store), report, recovering=True)
        self.spawn(takeover.keep())
        return report

    @contextlib.asynccontextmanager
    async def _owning_session(self, session_id: str) -> AsyncIterator[bool]:
        """Hold ``session_id``'s lease for a change of the session made outside a run.

        Claimed like a new run's (``run.takeover``: a free session, or one whose owner's
        term ran out, whose runs are then resumed here first); the change is then read
        and fenced under this daemon's term, so it neither overwrites the owner's writes
        nor lands after another daemon took the session. Yields False, holding nothing,
        while another live daemon owns the session: the change is handed to it
        (``sessions.handover``).
        """
        takeover, leases = self._takeover, self.leases
        assert takeover is not None and leases is not None
        if self.session_reader.get(session_id) is None:
            yield True  # nothing to own: the change answers NOT_FOUND
            return
        lease = await takeover.claim(session_id)
        if lease is None:
            yield False
            return
        try:
            yield True
        finally:
            await leases.unhold(session_id)

    async def _hand_change_over(self, change: SessionChange) -> ChangeAnswer:
        """Hand a session change to the session's owner; its answer once committed there
        (or wherever the session went: a dead owner's successor applies the row)."""
        return await hand_over(self.store, change, 2 * self._lease_ttl_s() + 5,
                               self._deps.now_ms)

    def _lost_session(self, session_id: str) -> None:
        """Another daemon took ``session_id`` over: stop its runs here without writing."""
        for actor in list(self._actors.values()):
            if actor.record.session_id == session_id:
                _log.warning("lost the lease on session %s: stopping run %s here",
                             session_id, actor.run_id)
                self.spawn(actor.park(0.0))

    async def drain(self) -> None:
        """Park every live run durably (SIGTERM): no terminal state, resumable."""
        self._draining = True
        actors = list(self._actors.values())
        if actors:
            async with asyncio.TaskGroup() as tg:
                for actor in actors:
                    tg.create_task(actor.park(self.config.drain_grace_s))
        if self._owning:
            await asyncio.wait(set(self._owning))

    # -- runs --------------------------------------------------------------
    async def start_run(self, identity: IdentityRec, start: StartRun) -> Started:
        """Resolve the session and accept + start a run in one append.

        Raises:
            InvalidArgument: malformed ids or selectors.
            AlreadyExists: the run id is taken.
            PalyraError: ``SESSION_IDENTITY_MISMATCH``, ``NOT_FOUND`` (require_existing),
                ``UNAVAILABLE`` while draining.
        """
        if self._draining or self._tg is None:
            raise coded(ErrorCode.UNAVAILABLE, "the daemon is shutting down")
        if start.text:
            parse_references(start.text)  # a malformed @reference fails before anything lands
        run_id = start.run_id.strip() or new_ulid()
        if not is_ulid(run_id):
            raise invalid("run_id must be a ULID", field="run_id")
        while (accepting := self._claimed.get(run_id)) is not None:
            # The same id is being accepted here (a client's retry that reached the daemon
            # starting its handed-over run, or two retries at once). ALREADY_EXISTS must
            # name a committed run, which every daemon reads and some daemon runs, not
            # one this daemon may still fail (or die) before committing: so wait for that
            # accept to settle, then look in the store.
            await asyncio.wait([accepting])
        if not (start.minted and start.run_id) and self.store.get_entity(RUNS, run_id) is not None:
            raise coded(ErrorCode.ALREADY_EXISTS, f"run {run_id} already exists", run_id=run_id)
        self._claimed[run_id] = accepted = asyncio.get_running_loop().create_future()
        try:
            outcome = await self._accept(identity, start, run_id)
        finally:
            del self._claimed[run_id]
            accepted.set_result(None)
        # Handed over (its row committed): wait for the owner's accept no longer
        # holding the id as accepted here. This daemon's own inbox reader may be the one
        # to start it (once the session is free), and must not take the id for taken.
        started = (outcome if isinstance(outcome, Started) else
                   await self._started_elsewhere(outcome, 2 * self._lease_ttl_s() + 5))
        session_id = started.session.session_id
        # The rest of the request that started it logs under the run (and its trace).
        structlog.contextvars.bind_contextvars(
            session_id=session_id, run_id=run_id,
            trace_id=trace_hex(run_trace_id(session_id, run_id)))
        return started

    def _lease_ttl_s(self) -> float:
        return self.leases.ttl_s if self.leases is not None else 0.0

    async def _accept(self, identity: IdentityRec, start: StartRun,
                      run_id: str) -> Started | RelayedStart:
        """The run accepted here, or handed over to its session's owner (committed)."""
        leases, takeover = self.leases, self._takeover
        async with self.session_writer.resolving(identity, start.selectors) as plan:
            session_id = plan.record.session_id
            lease = await takeover.claim(session_id) if takeover is not None else None
            if leases is not None and lease is not None and not (
                    plan.created or plan.reset_applied):
                # Read again under the lease: the plan's record was read before it, and
                # the session's previous owner may have written it since.
                plan.record = self.session_reader.get(session_id) or plan.record
            if leases is None or lease is not None:
                try:
                    return await self._accept_owned(identity, start, run_id, plan, lease)
                finally:
                    if leases is not None:
                        await leases.unhold(session_id)
            relayed = self._relayable(identity, start, run_id, plan)
        # Another daemon owns the session: it starts the run (``run.inbox``).
        await self.store.append([start_draft(relayed)])
        return relayed

    def _relayable(self, identity: IdentityRec, start: StartRun, run_id: str,
                   plan: SessionPlan) -> RelayedStart:
        """``start`` as a hand-over to the session's owner, when it can be one.

        An API or RunStream start (a reset one too: the owner plans the reset
        again, under its lease) is handed over. A delegated child never needs
        it: its session is named after the child run and created by the child's
        own accept, so it is owned elsewhere only once the child exists, which
        the start refuses first (``ALREADY_EXISTS``) and the delegation then waits
        on wherever it runs.

        Raises:
            PalyraError: ``UNAVAILABLE`` (retryable) when it cannot: a delegation or
                other start carrying writes of its own, a session another daemon
                created meanwhile, or a start handed over already (the session
                moved again: its row waits for the new owner).
        """
        if (start.driver not in ("api", "stream") or start.handed_over or start.parent_run_id
                or start.writes or plan.created):
            raise coded(ErrorCode.UNAVAILABLE, f"session {plan.record.session_id} is owned "
                        "by another daemon now; retry", session_id=plan.record.session_id)
        return RelayedStart(run_id, plan.record.session_id, identity, start.text,
                            start.attachments, start.complete, start.agent_id,
                            dict(start.agent_postures), start.model_route, start.response_cache,
                            start.token_budget, start.driver, plan.reset_applied)

    async def _started_elsewhere(self, relayed: RelayedStart, wait_s: float) -> Started:
        """The handed-over run once its owner committed its start."""
        try:
            async with asyncio.timeout(wait_s):
                while True:
                    raw = self.store.get_entity(RUNS, relayed.run_id)
                    if raw is not None:
                        break
                    await asyncio.sleep(0.02)
        except TimeoutError:
            raise coded(ErrorCode.UNAVAILABLE, f"run {relayed.run_id} is handed over to the "
                        "daemon that owns its session, which has not started it yet",
                        run_id=relayed.run_id) from None
        session = self.session_reader.require(relayed.session_id)
        return Started(redacted(decode(RunRecord, raw)), session, False, relayed.reset)

    async def _start_relayed(self, relayed: RelayedStart, consumed: EntityWrite) -> bool:
        """Start a run another daemon handed over, if this one can own its session."""
        try:
            await self.start_run(relayed.identity, StartRun(
                Selectors(session_id=relayed.session_id, reset=relayed.reset), text=relayed.text,
                attachments=relayed.attachments, run_id=relayed.run_id,
                complete=relayed.complete, agent_id=relayed.agent_id,
                agent_postures=relayed.agent_postures, model_route=relayed.model_route,
                response_cache=relayed.response_cache, token_budget=relayed.token_budget,
                driver=relayed.driver, writes=(consumed,), handed_over=True))
            return True
        except PalyraError as exc:
            if exc.code is ErrorCode.UNAVAILABLE:
                return False  # another daemon owns the session: it starts the run
            _log.warning("handed-over run %s not started: %s", relayed.run_id, exc.message)
            await self.store.append([EventDraft(kind="session.run_dropped", actor="engine",
                                                session_id=relayed.session_id,
                                                entity_writes=(consumed,))])
            return False

    async def _accept_owned(self, identity: IdentityRec, start: StartRun, run_id: str,
                            plan: SessionPlan, lease: Lease | None) -> Started:
        now = self._deps.now_ms()
        session = msgspec.structs.replace(
            plan.record, last_run_id=run_id, run_count=plan.record.run_count + 1,
            updated_ms=now)
        inputs = (InputRec(new_ulid(), start.text, len(start.attachments),
                           start.attachments),) if (
            start.text is not None) else ()
        record = RunRecord(run_id=run_id, session_id=session.session_id,
                           state=RunStateId.PENDING, identity=identity, created_ms=now,
                           updated_ms=now, driver=start.driver, pending_inputs=inputs,
                           complete_requested=start.complete,
                           previous_run_id=plan.record.last_run_id,
                           agent_id=start.agent_id,
                           agent_postures=dict(start.agent_postures),
                           model_route=start.model_route,
                           response_cache=start.response_cache,
                           parent_run_id=start.parent_run_id,
                           delegation_depth=start.delegation_depth,
                           token_budget=start.token_budget)
        writer = RunWriter(self.store, record, LoopState(), self._deps.now_ms, lease)
        writer.end_rider = start.end_rider
        batch = writer.batch().events(*plan.events)
        batch.write(*plan.entity_writes, record_write(session), *start.writes)
        batch.transition(RunEvent.ACCEPT, reason="accepted",
                         message=f"accepted session={session.session_id} "
                                 f"principal={identity.principal}"
                                 # A delegated child's tape names its parent.
                                 + (f" parent_run={start.parent_run_id}"
                                    if start.parent_run_id else ""))
        batch.transition(RunEvent.START, message="streaming")
        # The accept's event id is the run's id, so the journal (which refuses an event
        # id twice, inside the commit) accepts a run id once, whatever two daemons saw.
        batch.first_event_id = run_id
        try:
            await batch.commit()
        except AlreadyExists:
            raise coded(ErrorCode.ALREADY_EXISTS, f"run {run_id} already exists",
                        run_id=run_id) from None
        self._start_actor(RunActor(self._deps, writer))
        return Started(redacted(writer.record), session, plan.created, plan.reset_applied)

    def get_run(self, identity: IdentityRec, run_id: str) -> RunRecord:
        """The run's current record.

        Raises:
            NotFound: unknown run.
            PermissionDenied: the run belongs to another principal.
        """
        # Read the committed row, not the actor's copy: the row lands in the
        # same transaction as the tape events, so a client that just saw an
        # event on the tape never reads an older state here.
        raw = self.store.get_entity(RUNS, run_id) if run_id else None
        if raw is None:
            raise not_found("run", run_id)
        record = decode(RunRecord, raw)
        if not may_access(identity, record.identity):
            raise PermissionDenied(f"run {run_id} belongs to another principal")
        return record

    def _live(self, identity: IdentityRec, run_id: str) -> RunActor:
        actor = self._actors.get(run_id)
        if actor is not None:
            # A run's owner never changes, so a live run is checked on its actor's copy:
            # reading the committed row here would wait (blocking the loop) until LMDB
            # holds the run's latest commit, often one this very request follows.
            if not may_access(identity, actor.record.identity):
                raise PermissionDenied(f"run {run_id} belongs to another principal")
            return actor
        record = self.get_run(identity, run_id)
        if is_run_terminal(record.state):
            raise coded(ErrorCode.RUN_TERMINAL, f"run {run_id} is {record.state}",
                        run_id=run_id)
        raise coded(ErrorCode.UNAVAILABLE, f"run {run_id} is parked; retry after the "
                    "daemon restarts", run_id=run_id)

    def _live_or_elsewhere(self, identity: IdentityRec, run_id: str) -> RunActor | None:
        """The run's actor here, or None when it lives on another daemon (the
        journal is shared and the run is not terminal): hand the request over."""
        if self.leases is None or run_id in self._actors:
            return self._live(identity, run_id)
        record = self.get_run(identity, run_id)
        if is_run_terminal(record.state):
            raise coded(ErrorCode.RUN_TERMINAL, f"run {run_id} is {record.state}",
                        run_id=run_id)
        return None

    async def _hand_over(self, identity: IdentityRec, run_id: str,
                         message: RelayedMessage) -> RunRecord:
        """Queue ``message`` for the daemon that owns the run (``run.inbox``); the
        answer is the run's committed record. An input is answered once its owner
        queued it (or refused it: the run ended first, its queue is full), as a local
        caller is; a half-close or a cancel is idempotent and answered at once."""
        record = self.get_run(identity, run_id)
        wait_s = 2 * self._lease_ttl_s() + 5
        if message.text is not None:  # its sender waits: no owner queues it after that
            message = msgspec.structs.replace(
                message, deadline_ms=self._deps.now_ms() + int(wait_s * 1000))
        handed = message_draft(record, message, identity.principal)
        await self.store.append([handed])
        if message.text is None:
            return record
        await await_input_answer(self.store, run_id, handed, message.input_id, wait_s)
        return self.get_run(identity, run_id)

    async def _taken_over(self, session_id: str, run_id: str) -> RunActor | None:
        """The run's actor here once this daemon took its session over, where the
        session's owner is gone (its term ran out, or it stopped with the run parked);
        None while a live daemon owns it.

        The takeover is the sweep's and recovery's own (``run.takeover``: the claim
        fences the old owner out, then the run is resumed here), made at once for the
        request at hand instead of waiting for some daemon's next sweep.
        """
        takeover = self._takeover
        if takeover is None or self._draining:
            return None
        await takeover.take([session_id], RecoveryReport())
        return self._actors.get(run_id)

    async def _settled(self, identity: IdentityRec, run_id: str, wait_s: float) -> RunRecord:
        """The run's record once terminal, or as it is after ``wait_s``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):
                while True:
                    record = self.get_run(identity, run_id)
                    if is_run_terminal(record.state):
                        return record
                    await asyncio.sleep(0.05)
        return self.get_run(identity, run_id)

    async def send_input(self, identity: IdentityRec, run_id: str, text: str,
                         attachments: tuple[AttachmentRec, ...] = (), *,
                         complete: bool = False,
                         into_completing: bool = False) -> RunRecord:
        """Queue an input (``/cancel`` cancels the run instead); ``into_completing``:
        also into a run asked to complete that has not ended yet (see ``add_input``)."""
        if text.strip() == CANCEL_COMMAND:
            self._live_or_elsewhere(identity, run_id)
            await self.abort_run(identity, run_id, "cancel command")
            return self.get_run(identity, run_id)
        actor = self._live_or_elsewhere(identity, run_id)
        parse_references(text)  # a malformed @reference fails before anything lands
        if actor is None:
            actor = await self._taken_over(self.get_run(identity, run_id).session_id, run_id)
        if actor is None:
            return await self._hand_over(identity, run_id, RelayedMessage(
                new_ulid(), text, attachments, complete, into_completing))
        # The actor's copy is exact (a queued input keeps its secrets until the
        # model has it); callers get the stored, redacted form.
        return redacted(await actor.add_input(text, new_ulid(), attachments, complete,
                                              into_completing=into_completing))

    async def complete_run(self, identity: IdentityRec, run_id: str) -> RunRecord:
        """Half-close: done once the queue is empty and the loop idle."""
        actor = self._actors.get(run_id)
        if actor is not None and not is_run_terminal(actor.record.state):
            return redacted(await self._live(identity, run_id).request_complete())
        record = self.get_run(identity, run_id)
        if is_run_terminal(record.state):
            return record
        actor = self._live_or_elsewhere(identity, run_id)
        if actor is None:
            actor = await self._taken_over(self.get_run(identity, run_id).session_id, run_id)
        if actor is None:
            return await self._hand_over(identity, run_id, RelayedMessage(new_ulid(),
                                                                          complete=True))
        return redacted(await actor.request_complete())

    async def abort_run(self, identity: IdentityRec, run_id: str,
                        reason: str = "") -> tuple[bool, RunRecord]:
        """Cancel a run: the in-flight step stops at once and the run ends ``cancelled``."""
        record = self.get_run(identity, run_id)
        if is_run_terminal(record.state):
            return False, record
        actor = self._live_or_elsewhere(identity, run_id)
        if actor is None:
            actor = await self._taken_over(self.get_run(identity, run_id).session_id, run_id)
        if actor is None:
            await self._hand_over(identity, run_id, RelayedMessage(
                new_ulid(), cancel="cancelled_by_request"))
            return True, await self._settled(identity, run_id, 2.0)
        actor.request_cancel("cancelled_by_request")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                await actor.finished()
        return True, redacted(actor.record)

    def fail_run(self, run_id: str, error: Exception, reason: str) -> None:
        """Fail a live run from outside (e.g. a RunStream protocol error).

        A run that lives on another daemon (a RunStream's run handed over to its
        session's owner) cannot be failed from here: it is cancelled there, with
        ``reason``, through the run's inbox.
        """
        actor = self._actors.get(run_id)
        if actor is not None:
            actor.request_failure(as_palyra_error(error), reason)
        elif self.leases is not None:
            self.spawn(self._cancel_elsewhere(run_id, reason))

    async def _cancel_elsewhere(self, run_id: str, reason: str) -> None:
        try:
            raw = self.store.get_entity(RUNS, run_id)
            if raw is None or is_run_terminal((record := decode(RunRecord, raw)).state):
                return
            await self.store.append([message_draft(record, RelayedMessage(
                new_ulid(), cancel=reason), record.identity.principal)])
        except Exception:  # the run then completes when idle, like any run left alone
            _log.warning("could not hand the cancel of run %s over", run_id, exc_info=True)

    async def wait_run(self, identity: IdentityRec, run_id: str,
                       until_terminal: bool = False) -> RunRecord:
        """Wait until the run is terminal, parked on an approval or (unless
        ``until_terminal``) idle with nothing queued."""
        while True:
            record = self.get_run(identity, run_id)
            actor = self._actors.get(run_id)
            if actor is None or is_run_terminal(record.state):
                return record
            loop = actor.loop
            # Idle counts as settled only while more input may follow: a run whose
            # client asked to complete is about to end, and callers want that end.
            # The loop state is folded before its append lands, so it can run
            # ahead of the committed row; judge idleness only once the row has
            # caught up, or the answer is the row from before the loop's end.
            idle = (record.tape_len == loop.tape_len and not loop.loop_active
                    and not record.pending_inputs and not record.complete_requested)
            if not until_terminal and (record.state == RunStateId.WAITING_FOR_APPROVAL or idle):
                return record
            # The actor notifies on every commit and once more when it ends.
            await actor.wait_change()

    def recheck_idle(self) -> None:
        """Re-evaluate every live run's idle deadline against ``now_ms`` now.

        The idle timers sleep on the event loop's clock; call this when the
        engine clock jumped ahead of it (a fake clock in tests, wall time
        after a host suspend) so runs already past ``idle_complete_s`` end.
        """
        for actor in list(self._actors.values()):
            actor.recheck_idle()

    def phase_of(self, run_id: str) -> str | None:
        """What a live run's work is doing (``idle``, ``model``, ``tool``, ``approval``)."""
        actor = self._actors.get(run_id)
        return actor.phase if actor is not None else None

    # -- sessions ----------------------------------------------------------
    async def set_tool_posture(self, identity: IdentityRec, session_id: str, tool_name: str,
                               posture: str) -> SessionRecord:
        """Set (or clear, with ``""``) a session's posture for one tool, if the policy allows.

        Raises:
            PermissionDenied: Cedar's ``session.set_posture`` refuses it (by default:
                ``always_allow`` on a sensitive tool by a non-operator).
            NotFound, InvalidArgument, PalyraError: see ``SessionWriter.set_posture``.
        """
        allowed, reason = self._deps.policy.posture_change(identity, session_id, tool_name,
                                                           posture)
        if not allowed:
            raise PermissionDenied(reason, details={"tool_name": tool_name,
                                                    "posture": posture or "inherit"})
        return await self.session_writer.set_posture(identity, session_id, tool_name, posture)

    # -- approvals ---------------------------------------------------------
    async def decide_approval(self, identity: IdentityRec, approval_id: str, approve: bool,
                              scope: str, ttl_seconds: int, reason: str) -> ApprovalRecord:
        """Decide a pending approval from any client; returns the committed record.

        Raises:
            NotFound: unknown approval.
            PermissionDenied: the policy gate's ``approval.decide`` refuses the caller.
            InvalidArgument: timeboxed without a positive ttl.
            PalyraError: ``APPROVAL_ALREADY_DECIDED``.
        """
        # A live parked run's approval as it committed it, else the store's row.
        record = self._deps.pending.get(approval_id) or self.approval_reader.get(approval_id)
        if record is None:
            raise not_found("approval", approval_id)
        if not self._deps.policy.may_decide_approval(identity, record):
            raise PermissionDenied(f"{identity.principal} may not decide approvals",
                                   details={"approval_id": approval_id})
        if scope == "timeboxed" and ttl_seconds <= 0:
            raise invalid("a timeboxed decision needs ttl_seconds > 0", field="ttl_seconds")
        if record.state != ApprovalStateId.PENDING:
            raise coded(ErrorCode.APPROVAL_ALREADY_DECIDED,
                        f"approval {approval_id} is already {record.state}",
                        approval_id=approval_id)
        decision = Decision(ApprovalEvent.APPROVE if approve else ApprovalEvent.DENY, scope or "once",
                            ttl_seconds if scope == "timeboxed" else 0, reason,
                            identity.principal, self._deps.now_ms())
        if not record.run_id:  # an approval of a subject outside any run (e.g. pairing)
            subject = record.prompt.subject_id
            decide = next((h for prefix, h in self._subject_deciders.items()
                           if subject.startswith(prefix)), None)
            if decide is None:
                raise coded(ErrorCode.UNAVAILABLE, f"nothing decides {subject} approvals in "
                            "this daemon", approval_id=approval_id)
            return redacted(await decide(record, decision))
        actor = self._actors.get(record.run_id)
        if actor is None and self.leases is not None:
            # Nobody owns the run's session any more: take it over (the run resumes
            # here, waiting on this approval) and relay the decision to it as below.
            await self._taken_over(record.session_id, record.run_id)
            # The run lives on the daemon that owns its session (here, after that
            # takeover): the decision reaches it through the journal.
            return redacted(await relay_decision(self.store, self.approval_reader, record,
                                                 decision, 2 * self.leases.ttl_s + 5,
                                                 self._deps.now_ms))
        if actor is None:
            raise coded(ErrorCode.UNAVAILABLE, f"run {record.run_id} is not live; retry "
                        "after the daemon restarts", run_id=record.run_id)
        # The answer is the committed row, in its stored form: redacted (a reason may
        # quote a secret) as the run wrote it (``ApprovalMailbox.resolve``).
        return await actor.deliver(approval_id, decision)
