"""One asyncio task owns one run's lifetime: inputs, completion, cancellation, parking.

The actor's main task never runs model or tool code itself. Each unit of
work (the agent loop for the queued inputs, over the run's :class:`Step`)
runs in a child task of the actor's TaskGroup, so ``abort`` can cancel exactly
that work (a provider call, a tool, an approval wait) with plain asyncio
cancellation and the actor, which was not cancelled, then journals the
``cancel`` transition. Failures after accept all end in
:meth:`RunActor._finalize`, the one ``finalize_failure`` path. Decisions for
the run's approvals are forwarded to the step's mailbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import structlog
from palyra_gen.palyra import v1 as pb

from palyra.core.errors import ErrorCode, PalyraError
from palyra.core.trace_ids import run_trace_id, trace_hex
from palyra.engine.model import approvals as appr
from palyra.engine.model.approvals import Decision
from palyra.engine.model.errors import as_palyra_error, coded, reason_of
from palyra.engine.model.fold import LoopState, ProposalPhase
from palyra.engine.model.lifecycle import (
    ApprovalEvent,
    ApprovalStateId,
    RunEvent,
    RunStateId,
    is_run_terminal,
    run_can,
)
from palyra.engine.model.records import ApprovalRecord, AttachmentRec, InputRec, RunRecord
from palyra.engine.run.approvals import approval_write
from palyra.engine.run.deps import EngineDeps
from palyra.engine.run.flag import Flag
from palyra.engine.run.loop import advance
from palyra.engine.run.step import Step
from palyra.engine.run.writer import Batch, RunWriter, end_reason_on_complete
from palyra.journal import EntityWrite, EventDraft, RowExpectation

log = logging.getLogger("palyra.engine")

class RunActor:
    """The single owner of one run's writes."""

    def __init__(self, deps: EngineDeps, writer: RunWriter,
                 unknown_inflight: frozenset[str] = frozenset()) -> None:
        self._deps = deps
        self._writer = writer
        self._step = Step(deps, writer, unknown_inflight)
        self._finished = Flag()
        self._error: PalyraError | None = None
        self._fail_reason = ""
        self._wake = Flag()
        self._cancel_reason = ""
        self._parking = False
        self._work: asyncio.Task[None] | None = None
        self._work_error: Exception | None = None
        # Set while a cascade holds the run (its work stopped, its end staged in
        # an ancestor's append): the actor starts nothing until it is released.
        self._hold: Flag | None = None

    @property
    def run_id(self) -> str:
        """The run this actor owns."""
        return self._writer.record.run_id

    @property
    def phase(self) -> str:
        """What the run's work is doing: ``idle``, ``model``, ``tool`` or ``approval``."""
        return self._step.phase

    @property
    def loop(self) -> LoopState:
        """The run's tape-derived loop state (folded ahead of the committed row)."""
        return self._writer.loop

    async def finished(self) -> None:
        """Return once the actor has stopped (terminal or parked)."""
        await self._finished.wait()

    async def wait_change(self) -> None:
        """Return after the run's next commit (or when the actor stops)."""
        await self._writer.wait_change()

    @property
    def record(self) -> RunRecord:
        """The committed run record."""
        return self._writer.record

    # -- requests from other tasks -------------------------------------------
    async def add_input(self, text: str, input_id: str, attachments: tuple[AttachmentRec, ...],
                        complete: bool, *, into_completing: bool = False,
                        writes: tuple[EntityWrite, ...] = (),
                        expect: tuple[RowExpectation, ...] = ()) -> RunRecord:
        """Queue one input durably (processed in order after earlier ones).

        ``into_completing``: a run whose driver asked it to complete still takes the
        input while it has not ended (it completes after answering it); the channel
        router, which half-closes its own runs, uses this to give a conversation's
        running run the messages that arrive meanwhile.

        ``writes``: entity writes of the same commit (a handed-over message's row
        deleted, ``run.inbox``); ``expect``: rows it stands on (that message's row, still
        there: its sender has not given up).

        Raises:
            PalyraError: ``RUN_TERMINAL`` if the run ended or is completing;
                ``RESOURCE_EXHAUSTED`` if too many inputs are queued;
                ``UNAVAILABLE`` while the daemon drains.
        """
        async with self._writer.lock:
            rec = self._writer.record
            self._check_open(rec, into_completing=into_completing)
            if len(rec.pending_inputs) >= self._deps.config.max_pending_inputs:
                raise coded(ErrorCode.RESOURCE_EXHAUSTED,
                            f"run {rec.run_id} already has {len(rec.pending_inputs)} queued "
                            "inputs", run_id=rec.run_id)
            inputs = (*rec.pending_inputs,
                      InputRec(input_id, text, len(attachments), attachments))
            batch = self._writer.batch().set(pending_inputs=inputs,
                                            complete_requested=complete or (
                                                into_completing and rec.complete_requested))
            await batch.write(*writes).expecting(*expect).commit_locked()
        self._wake.set()
        return self._writer.record

    async def request_complete(self) -> RunRecord:
        """Half-close: the run becomes done once its queue is empty and the loop idle."""
        async with self._writer.lock:
            rec = self._writer.record
            if is_run_terminal(rec.state) or rec.complete_requested:
                return rec
            await self._writer.batch().set(complete_requested=True).commit_locked()
        self._wake.set()
        return self._writer.record

    def _check_open(self, rec: RunRecord, *, into_completing: bool = False) -> None:
        if is_run_terminal(rec.state):
            raise coded(ErrorCode.RUN_TERMINAL, f"run {rec.run_id} is {rec.state}",
                        run_id=rec.run_id)
        if rec.complete_requested and not into_completing:
            raise coded(ErrorCode.RUN_TERMINAL,
                        f"run {rec.run_id} is completing and takes no more input",
                        run_id=rec.run_id)
        if self._parking:
            raise coded(ErrorCode.UNAVAILABLE, "the daemon is shutting down; retry later")

    def request_cancel(self, reason: str) -> None:
        """Cancel the in-flight step now; the actor then journals ``cancel``."""
        if not self._cancel_reason:
            self._cancel_reason = reason or "cancelled_by_request"
        if self._work is not None:
            self._work.cancel()
        self._wake.set()

    @property
    def ending(self) -> bool:
        """The run was asked to end (cancel, failure, a cascade): its work is being stopped
        for good, so a tool that waits on a child run leaves the child to the cascade."""
        return bool(self._cancel_reason or self._error is not None or self._hold is not None)

    def request_failure(self, error: PalyraError, reason: str) -> None:
        """Fail the run (e.g. a stream protocol error) after stopping its step."""
        if self._error is None:
            self._error = error
            self._fail_reason = reason or "failed"
        if self._work is not None:
            self._work.cancel()
        self._wake.set()

    async def park(self, grace_s: float) -> None:
        """Stop without a terminal state (SIGTERM); the run stays resumable.

        A tool in flight gets ``grace_s`` to finish so its result is
        journaled; model calls and approval waits are cancelled at once
        (re-asking the model is free and the approval stays pending).
        """
        self._parking = True
        self._step.parking = True
        self._wake.set()
        work = self._work
        if work is not None and self._step.phase == "tool":
            await asyncio.wait({work}, timeout=grace_s)
        if self._work is not None:
            self._work.cancel()
        await self._finished.wait()

    def deliver(self, approval_id: str, decision: Decision) -> asyncio.Future[ApprovalRecord]:
        """Forward a decision to the step's mailbox; the future answers once it is committed.

        Raises:
            PalyraError: ``APPROVAL_ALREADY_DECIDED`` when a decision (or the
                timeout) already answered it.
        """
        return self._step.mailbox.deliver(approval_id, decision)

    # -- the owning task ---------------------------------------------------
    async def main(self) -> None:
        """Drive the run until it is terminal or parked. Never raises (but cancellation)."""
        # This task's own context (a copy of its starter's): every line logged while
        # the run works names its session, its run and the run's trace.
        record = self._writer.record
        structlog.contextvars.bind_contextvars(
            session_id=record.session_id, run_id=record.run_id,
            trace_id=trace_hex(run_trace_id(record.session_id, record.run_id)))
        try:
            async with asyncio.TaskGroup() as tg:
                while True:
                    if self._hold is not None:
                        await self._hold.wait()
                        continue
                    if self._error is not None:
                        await self._finalize(RunEvent.FAIL, self._fail_reason, self._error)
                        return
                    if self._cancel_reason:
                        await self._finalize(RunEvent.CANCEL, self._cancel_reason, None)
                        return
                    if self._parking or is_run_terminal(self._writer.state):
                        return
                    if self._writer.state == RunStateId.ACCEPTED:
                        await self._writer.batch().transition(RunEvent.START, message="streaming").commit()
                        continue
                    if self._idle():
                        if self._writer.record.complete_requested:
                            await self._complete()
                            return
                        wait_s = self._idle_wait_s()
                        if wait_s is not None and wait_s <= 0:
                            await self._complete_idle()
                            continue
                        self._wake.clear()
                        # The idle-run timer: this wait, bounded by the deadline.
                        # Any wake (an input, cancel, park, recheck_idle) comes
                        # back here and the deadline is recomputed from the
                        # committed record, so new activity pushes it out. A
                        # plain timer handle that wakes the run, not
                        # asyncio.timeout: every idle open run holds one, and a
                        # timeout's context manager and cancel machinery cost
                        # ~600 B more each.
                        timer = (None if wait_s is None else
                                 asyncio.get_running_loop().call_later(wait_s, self._wake.set))
                        try:
                            await self._wake.wait()
                        finally:
                            if timer is not None:
                                timer.cancel()
                        continue
                    self._work_error = None
                    self._work = work = tg.create_task(self._guarded_work())
                    await _ended(work)
                    self._work = None
                    self._step.phase = "idle"
                    exc = self._take_work_error()
                    if exc is not None:
                        await self._finalize(RunEvent.FAIL, reason_of(exc), as_palyra_error(exc))
                        return
        except Exception as exc:
            if _lease_stale(exc):  # another daemon owns the session now and resumes the run
                self._lose_ownership()
                return
            # A bug in the actor itself: never leave the run stuck.
            log.exception("run actor crashed", extra={"run_id": self.run_id})
            try:
                await self._finalize(RunEvent.FAIL, "internal_error",
                                     PalyraError("internal error in the run actor"))
            except Exception:
                log.exception("could not fail run after actor crash")
        finally:
            self._step.deadline.close()  # no timer outlives the run's work
            self._release_waiters()
            self._finished.set()
            self._writer.notify()

    async def _guarded_work(self) -> None:
        # An error of the step must reach _finalize, not abort the TaskGroup;
        # cancellation (abort, park) propagates untouched.
        try:
            await advance(self._step)
        except Exception as exc:
            self._work_error = exc

    def _take_work_error(self) -> Exception | None:
        exc, self._work_error = self._work_error, None
        return exc

    def _idle(self) -> bool:
        loop = self._writer.loop
        return not loop.loop_active and not self._writer.record.pending_inputs

    def recheck_idle(self) -> None:
        """Re-evaluate the idle deadline now (the engine clock may have jumped)."""
        self._wake.set()

    def _idle_wait_s(self) -> float | None:
        """Seconds until the idle-run deadline (<= 0: due), None when disabled.

        One timer per idle actor rather than an engine-wide sweeper: the actor
        already sleeps on ``_wake`` when idle and is the only task allowed to
        write its run, so bounding that sleep by the deadline costs no extra
        task, no cross-task handoff and no polling interval, and the deadline
        is exact. It is derived from the journaled ``last_active_ms`` and the
        engine clock (``now_ms``), so it survives restarts.
        """
        idle_s = self._deps.config.idle_complete_s
        rec = self._writer.record
        if idle_s <= 0 or rec.state != RunStateId.IN_PROGRESS:
            return None
        since = rec.last_active_ms or rec.updated_ms
        return (since + int(idle_s * 1000) - self._deps.now_ms()) / 1000

    async def _complete_idle(self) -> None:
        """Complete an idle API run past the idle deadline (``idle_timeout``).

        Re-checked under the run lock: an input committed meanwhile is new
        activity (the run is then not idle, or its deadline moved), and an
        input arriving after this commit is refused with ``RUN_TERMINAL``.
        """
        async with self._writer.lock:
            wait_s = self._idle_wait_s()
            rec = self._writer.record
            if (wait_s is None or wait_s > 0 or not self._idle() or rec.complete_requested
                    or self._parking or not run_can(rec.state, RunEvent.COMPLETE)):
                return
            idle_s = self._deps.config.idle_complete_s
            await self._writer.batch().transition(RunEvent.COMPLETE, reason="idle_timeout",
                message=f"completed: idle with no input for {idle_s:g} s").set(
                end_reason="idle_timeout").commit_locked()

    async def _complete(self) -> None:
        async with self._writer.lock:
            if run_can(self._writer.state, RunEvent.COMPLETE):
                reason = end_reason_on_complete(self._writer.record.end_reason)
                await self._writer.batch().transition(RunEvent.COMPLETE, message="completed", reason=reason).set(
                    end_reason=reason).commit_locked()

    def _lose_ownership(self) -> None:
        """A commit was fenced out: this daemon lost the run's session to another one.

        The actor stops without writing (it could not); the new owner resumes the
        run from its journal as start-up recovery does.
        """
        self._parking = True
        self._step.parking = True
        log.warning("run %s: the session's lease was taken over; its new owner resumes it",
                    self.run_id)

    async def _finalize(self, event: str, reason: str, error: PalyraError | None) -> None:
        """The single path to ``failed`` / ``cancelled``; a no-op once terminal."""
        if error is not None and error.code is ErrorCode.LEASE_STALE:
            self._lose_ownership()
            return
        carry = self._step.take_carry()
        # (A carried batch whose commit landed as the step was stopped is spent.)
        if carry is not None and carry.members and not carry.committed:
            await carry.commit()
        async with self._writer.lock:
            batch = self._end_batch(self._writer.batch(), event, reason, error)
            if batch is None:
                return
            async with contextlib.AsyncExitStack() as stack:
                # What the run's end causes elsewhere (its tasks cancelled, the
                # child runs it delegated to ended) lands in the same commit; a
                # contributor applies it only if the commit does.
                record = self._writer.record
                for contribute in self._deps.end_contributors:
                    batch.events(*await stack.enter_async_context(contribute(record, event)))
                if self._deps.cascade is not None:
                    batch.events(*await stack.enter_async_context(
                        self._deps.cascade(record, event)))
                await batch.commit_locked()

    def _end_batch(self, batch: Batch, event: str, reason: str, error: PalyraError | None,
                   message: str = "") -> Batch | None:
        """``batch`` plus what ends the run (None: it ended already); the caller holds
        the writer's lock."""
        state = self._writer.state
        if is_run_terminal(state) or not run_can(state, event):
            return None
        if error is not None:
            batch.add(pb.RunError(code=_code_proto(error.code), message=error.message))
        if self._writer.loop.loop_active:
            batch.add(pb.AgentLoop(phase=pb.AgentLoopPhase.TERMINATED,
                                   turn=self._writer.loop.turn_count, reason=reason))
        self._cancel_pending_approvals(batch, reason)
        message = message or ("cancelled by request" if event == RunEvent.CANCEL
                              else (error.message if error else reason))
        batch.transition(event, message=message, reason=reason)
        batch.set(end_reason=reason, pending_approval_id="",
                  error_code=error.code.value if error else "",
                  error_message=error.message if error else "")
        return batch

    # -- ended by an ancestor's append (``run.cascade``) -----------------------
    @contextlib.asynccontextmanager
    async def held(self, reason: str) -> AsyncIterator[None]:
        """Stop the run's work and start nothing more while the block runs.

        A cascade holds every descendant before it reads their children, so no
        child run can be started behind its back. Whatever happens inside, the
        run ends ``cancelled`` with ``reason`` afterwards: in the cascade's
        append when :meth:`ending_in` staged it, else by itself.
        """
        hold = Flag()
        self._hold = hold
        try:
            work = self._work
            if work is not None:
                work.cancel()
                await asyncio.wait({work})
            yield
        finally:
            if not self._cancel_reason:
                self._cancel_reason = reason
            self._hold = None
            hold.set()
            self._wake.set()

    @contextlib.asynccontextmanager
    async def ending_in(self, reason: str, message: str) -> AsyncIterator[list[EventDraft]]:
        """The drafts that cancel this (held) run, for an ancestor's append.

        What the step had taped but not committed rides along, and so does what
        the run's end causes (its tasks cancelled). The run's record moves only
        if the block ends without an error, i.e. the append landed.
        """
        async with self._writer.lock:
            carry = self._step.take_carry()
            batch = self._end_batch(carry if carry is not None and not carry.committed
                                    else self._writer.batch(),
                                    RunEvent.CANCEL, reason, None, message)
            if batch is None:
                yield []
                return
            async with contextlib.AsyncExitStack() as stack:
                record = self._writer.record
                for contribute in self._deps.end_contributors:
                    batch.events(*await stack.enter_async_context(
                        contribute(record, RunEvent.CANCEL)))
                staged = batch.stage()
                try:
                    yield staged.drafts
                except BaseException:
                    staged.abandon()
                    raise
                staged.land()

    def _cancel_pending_approvals(self, batch: Batch, reason: str) -> None:
        for p in self._writer.loop.proposals:
            if p.phase is ProposalPhase.WAITING and p.approval_id:
                record = (self._deps.pending.get(p.approval_id)
                          or self._deps.approval_reader.get(p.approval_id))
                self._deps.pending.discard(p.approval_id)  # its row changes in this commit
                if record is not None and record.state == ApprovalStateId.PENDING:
                    batch.write(approval_write(appr.transitioned(record, ApprovalEvent.CANCEL,
                                                             f"run ended: {reason}")))

    def _release_waiters(self) -> None:
        self._step.mailbox.close(parking=self._parking)


def _ended(task: asyncio.Task[None]) -> asyncio.Future[None]:
    """Done once ``task`` is, whatever its outcome, as ``asyncio.wait({task})`` waits (this
    waiter's cancellation leaves ``task`` running), in one Python call where that took
    about a dozen (its argument checks, a set, a generator, ``_wait``'s callbacks)."""
    ended = task.get_loop().create_future()

    def end(_: object) -> None:
        if not ended.done():  # the waiter was cancelled
            ended.set_result(None)

    task.add_done_callback(end)
    return ended


def _lease_stale(exc: BaseException) -> bool:
    return isinstance(exc, PalyraError) and exc.code is ErrorCode.LEASE_STALE


def _code_proto(code: ErrorCode) -> pb.ErrorCode:
    try:
        return pb.ErrorCode[code.value]
    except KeyError:
        return pb.ErrorCode.INTERNAL
