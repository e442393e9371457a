"""One asyncio task owns one run: inputs, completion, cancellation, parking.

The actor's main task never runs model or tool code itself. Each unit of
work (the agent loop for the queued inputs) runs in a child task of the
actor's TaskGroup, so ``abort`` can cancel exactly that step (a provider call,
a tool, an approval wait) with plain asyncio cancellation and the actor, which
was not cancelled, then journals the ``cancel`` transition. Failures after
accept all end in :meth:`RunActor._finalize` — the one ``finalize_failure``
path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Literal

import msgspec
from palyra_gen.palyra import v1 as pb

from palyra.core.errors import ErrorCode, PalyraError
from palyra.engine import _approvals as appr
from palyra.engine._approvals import Decision
from palyra.engine._deps import EngineDeps
from palyra.engine._errors import coded
from palyra.engine._failures import as_palyra_error, reason_of
from palyra.engine._loop import advance
from palyra.engine._loopstate import ProposalPhase
from palyra.engine._machines import is_run_terminal, run_can
from palyra.engine._records import ApprovalRecord, InputRec, RunRecord
from palyra.engine._writer import Batch, RunWriter, end_reason_on_complete

log = logging.getLogger("palyra.engine")

Phase = Literal["idle", "model", "tool", "approval"]


class RunActor:
    """The single owner of one run's writes."""

    def __init__(self, deps: EngineDeps, writer: RunWriter,
                 unknown_inflight: frozenset[str] = frozenset()) -> None:
        self.deps = deps
        self.writer = writer
        self.phase: Phase = "idle"
        self.carry: Batch | None = None
        self.decisions: dict[str, asyncio.Future[Decision]] = {}
        self.acks: dict[str, asyncio.Future[ApprovalRecord]] = {}
        # Proposals allowed before a restart with no result on the tape: the
        # tool may or may not have run, so only read-only tools are re-run.
        self.unknown_inflight = set(unknown_inflight)
        self.finished = asyncio.Event()
        self.error: PalyraError | None = None
        self.end_error: PalyraError | None = None
        self._fail_reason = ""
        self._wake = asyncio.Event()
        self._cancel_reason = ""
        self._parking = False
        self._work: asyncio.Task[None] | None = None
        self._work_error: Exception | None = None
        self.active_s = 0.0

    @property
    def run_id(self) -> str:
        """The run this actor owns."""
        return self.writer.record.run_id

    @property
    def parking(self) -> bool:
        """True once the daemon asked this run to park (SIGTERM)."""
        return self._parking

    @property
    def record(self) -> RunRecord:
        """The committed run record."""
        return self.writer.record

    # -- requests from other tasks -------------------------------------------
    async def add_input(self, text: str, input_id: str, attachments: int,
                        complete: bool) -> RunRecord:
        """Queue one input durably (processed in order after earlier ones).

        Raises:
            PalyraError: ``RUN_TERMINAL`` if the run ended or is completing;
                ``RESOURCE_EXHAUSTED`` if too many inputs are queued;
                ``UNAVAILABLE`` while the daemon drains.
        """
        async with self.writer.lock:
            rec = self.writer.record
            self._check_open(rec)
            if len(rec.pending_inputs) >= self.deps.config.max_pending_inputs:
                raise coded(ErrorCode.RESOURCE_EXHAUSTED,
                            f"run {rec.run_id} already has {len(rec.pending_inputs)} queued "
                            "inputs", run_id=rec.run_id)
            inputs = (*rec.pending_inputs, InputRec(input_id, text, attachments))
            batch = self.writer.batch().set(pending_inputs=inputs,
                                            complete_requested=complete)
            await batch.commit_locked()
        self._wake.set()
        return self.writer.record

    async def request_complete(self) -> RunRecord:
        """Half-close: the run becomes done once its queue is empty and the loop idle."""
        async with self.writer.lock:
            rec = self.writer.record
            if is_run_terminal(rec.state) or rec.complete_requested:
                return rec
            await self.writer.batch().set(complete_requested=True).commit_locked()
        self._wake.set()
        return self.writer.record

    def _check_open(self, rec: RunRecord) -> None:
        if is_run_terminal(rec.state):
            raise coded(ErrorCode.RUN_TERMINAL, f"run {rec.run_id} is {rec.state}",
                        run_id=rec.run_id)
        if rec.complete_requested:
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

    def request_failure(self, error: PalyraError, reason: str) -> None:
        """Fail the run (e.g. a stream protocol error) after stopping its step."""
        if self.error is None:
            self.error = error
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
        self._wake.set()
        work = self._work
        if work is not None and self.phase == "tool":
            await asyncio.wait({work}, timeout=grace_s)
        if self._work is not None:
            self._work.cancel()
        await self.finished.wait()

    def deliver(self, approval_id: str, decision: Decision) -> asyncio.Future[ApprovalRecord]:
        """Hand a decision to the step waiting on ``approval_id``.

        Raises:
            PalyraError: ``APPROVAL_ALREADY_DECIDED`` when a decision (or the
                timeout) already answered it.
        """
        # The caller checked the record is pending; after a restart the step may
        # not be waiting yet, so the future is created here and picked up later.
        fut = self.expect_decision(approval_id)
        if fut.done():
            raise coded(ErrorCode.APPROVAL_ALREADY_DECIDED,
                        f"approval {approval_id} is already decided",
                        approval_id=approval_id)
        ack: asyncio.Future[ApprovalRecord] = asyncio.get_running_loop().create_future()
        self.acks[approval_id] = ack
        fut.set_result(decision)
        return ack

    def expect_decision(self, approval_id: str) -> asyncio.Future[Decision]:
        """Register the future a decision for ``approval_id`` will resolve."""
        fut = self.decisions.get(approval_id)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self.decisions[approval_id] = fut
        return fut

    # -- the owning task ---------------------------------------------------
    async def main(self) -> None:
        """Drive the run until it is terminal or parked. Never raises (but cancellation)."""
        try:
            async with asyncio.TaskGroup() as tg:
                while True:
                    if self.error is not None:
                        await self._finalize("fail", self._fail_reason, self.error)
                        return
                    if self._cancel_reason:
                        await self._finalize("cancel", self._cancel_reason, None)
                        return
                    if self._parking or is_run_terminal(self.writer.state):
                        return
                    if self.writer.state == "accepted":
                        await self.writer.batch().transition(
                            "start", message="streaming").commit()
                        continue
                    if self._idle():
                        if self.writer.record.complete_requested:
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
                        # committed record, so new activity pushes it out.
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(wait_s):
                                await self._wake.wait()
                        continue
                    self._work_error = None
                    self._work = tg.create_task(self._guarded_work())
                    await asyncio.wait({self._work})
                    self._work = None
                    self.phase = "idle"
                    exc = self._take_work_error()
                    if exc is not None:
                        await self._finalize("fail", reason_of(exc), as_palyra_error(exc))
                        return
        except Exception:  # a bug in the actor itself: never leave the run stuck
            log.exception("run actor crashed", extra={"run_id": self.run_id})
            try:
                await self._finalize("fail", "internal_error",
                                     PalyraError("internal error in the run actor"))
            except Exception:
                log.exception("could not fail run after actor crash")
        finally:
            self._release_waiters()
            self.finished.set()
            self.writer.notify()

    async def _guarded_work(self) -> None:
        # An error of the step must reach _finalize, not abort the TaskGroup;
        # cancellation (abort, park) propagates untouched.
        try:
            await advance(self)
        except Exception as exc:
            self._work_error = exc

    def _take_work_error(self) -> Exception | None:
        exc, self._work_error = self._work_error, None
        return exc

    def _idle(self) -> bool:
        loop = self.writer.loop
        return not loop.loop_active and not self.writer.record.pending_inputs

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
        idle_s = self.deps.config.idle_complete_s
        rec = self.writer.record
        if idle_s <= 0 or rec.state != "in_progress":
            return None
        since = rec.last_active_ms or rec.updated_ms
        return (since + int(idle_s * 1000) - self.deps.now_ms()) / 1000

    async def _complete_idle(self) -> None:
        """Complete an idle API run past the idle deadline (``idle_timeout``).

        Re-checked under the run lock: an input committed meanwhile is new
        activity (the run is then not idle, or its deadline moved), and an
        input arriving after this commit is refused with ``RUN_TERMINAL``.
        """
        async with self.writer.lock:
            wait_s = self._idle_wait_s()
            rec = self.writer.record
            if (wait_s is None or wait_s > 0 or not self._idle() or rec.complete_requested
                    or self._parking or not run_can(rec.state, "complete")):
                return
            idle_s = self.deps.config.idle_complete_s
            await self.writer.batch().transition(
                "complete", reason="idle_timeout",
                message=f"completed: idle with no input for {idle_s:g} s").set(
                end_reason="idle_timeout").commit_locked()

    async def _complete(self) -> None:
        async with self.writer.lock:
            if run_can(self.writer.state, "complete"):
                reason = end_reason_on_complete(self.writer.record.end_reason)
                await self.writer.batch().transition(
                    "complete", message="completed", reason=reason).set(
                    end_reason=reason).commit_locked()

    async def _finalize(self, event: str, reason: str, error: PalyraError | None) -> None:
        """The single path to ``failed`` / ``cancelled``; a no-op once terminal."""
        if self.carry is not None:
            carry, self.carry = self.carry, None
            if carry.members:
                await carry.commit()
        async with self.writer.lock:
            state = self.writer.state
            if is_run_terminal(state) or not run_can(state, event):
                return
            batch = self.writer.batch()
            if error is not None:
                batch.add(pb.RunError(code=_code_proto(error.code), message=error.message))
            if self.writer.loop.loop_active:
                batch.add(pb.AgentLoop(phase=pb.AgentLoopPhase.TERMINATED,
                                       turn=self.writer.loop.turn_count, reason=reason))
            self._cancel_pending_approvals(batch, reason)
            message = ("cancelled by request" if event == "cancel"
                       else (error.message if error else reason))
            batch.transition(event, message=message, reason=reason)
            if error is not None:
                self.end_error = error
            batch.set(end_reason=reason, pending_approval_id="",
                      error_code=error.code.value if error else "",
                      error_message=error.message if error else "")
            await batch.commit_locked()

    def _cancel_pending_approvals(self, batch: Batch, reason: str) -> None:
        for p in self.writer.loop.proposals:
            if p.phase is ProposalPhase.WAITING and p.approval_id:
                record = self.deps.approvals.get(p.approval_id)
                if record is not None and record.state == "pending":
                    batch.write(appr.write(appr.transitioned(record, "cancel",
                                                             f"run ended: {reason}")))

    def _release_waiters(self) -> None:
        for approval_id, ack in self.acks.items():
            if not ack.done():
                ack.set_exception(coded(
                    ErrorCode.UNAVAILABLE if self._parking else ErrorCode.RUN_TERMINAL,
                    f"the run ended before decision on {approval_id} was recorded",
                    approval_id=approval_id))
        for fut in self.decisions.values():
            if not fut.done():
                fut.cancel()

    def remaining_wall_s(self) -> float:
        """Active wall-clock budget left for the current agent loop."""
        return self.deps.config.max_wall_s - self.active_s

    def with_record(self, **changes: object) -> RunRecord:
        """A copy of the committed record with ``changes`` (no write)."""
        return msgspec.structs.replace(self.writer.record, **changes)


def _code_proto(code: ErrorCode) -> pb.ErrorCode:
    try:
        return pb.ErrorCode[code.value]
    except KeyError:
        return pb.ErrorCode.INTERNAL
