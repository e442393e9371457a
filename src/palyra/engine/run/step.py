"""One run's unit of work: the mutable state the loop and the tool flow share.

The actor (``run.actor``) owns a run's lifetime: inputs, cancellation,
parking, finalisation. What one piece of work needs while it runs lives here
instead, so the loop (``run.loop``) and the tool flow (``run.toolflow``) take
a ``Step`` and never reach into the actor:

- the run's writer and the shared ports (``deps``);
- the *carry* batch: members taped but not yet committed (a streamed model
  turn), which ride along with a cancel or fail commit if the step dies;
- the *phase* (``model`` / ``tool`` / ``approval``), so parking knows whether
  a tool is in flight and deserves its grace period;
- the active-time clock of the current agent loop (time parked on an
  approval does not count against ``max_wall_s``);
- the approval mailbox, where other tasks deliver decisions.
"""

from __future__ import annotations

import asyncio
import time
from types import TracebackType
from typing import Literal

from palyra.core.errors import ErrorCode
from palyra.engine.model.approvals import Decision
from palyra.engine.model.errors import coded
from palyra.engine.model.records import ApprovalRecord, RunRecord
from palyra.engine.run.approvals import PendingApprovals
from palyra.engine.run.deadline import RunDeadline
from palyra.engine.run.deps import EngineDeps
from palyra.engine.run.writer import Batch, RunWriter

Phase = Literal["idle", "model", "tool", "approval"]


class ApprovalMailbox:
    """Decisions for one run's approvals: delivered by any task, awaited by the step.

    ``expect`` and ``deliver`` may happen in either order (after a restart a
    decision can arrive before the step is waiting again), so both create the
    decision future on demand. ``deliver`` hands the decider an *ack* future
    that ``resolve`` completes with the committed record, so a client's
    DecideApproval answers only once its decision is durable. When the run
    stops, its approvals leave ``pending`` (the committed rows of live parked
    runs, ``run.approvals.PendingApprovals``): from then on the store answers.
    """

    def __init__(self, pending: PendingApprovals | None = None) -> None:
        self._pending = pending if pending is not None else PendingApprovals()
        self._decisions: dict[str, asyncio.Future[Decision]] = {}
        self._acks: dict[str, asyncio.Future[ApprovalRecord]] = {}
        self._closed = False

    def expect(self, approval_id: str) -> asyncio.Future[Decision]:
        """The future a decision for ``approval_id`` will resolve."""
        fut = self._decisions.get(approval_id)
        # The run awaits this future itself (``toolflow._decision_within``), so cancelling
        # its work cancels the future too: until the run stops (``close``), a decision is
        # still taken, on a fresh one, and its decider told by ``close`` as before.
        if fut is None or (fut.cancelled() and not self._closed):
            fut = asyncio.get_running_loop().create_future()
            self._decisions[approval_id] = fut
        return fut

    def deliver(self, approval_id: str, decision: Decision) -> asyncio.Future[ApprovalRecord]:
        """Hand ``decision`` to whoever waits on ``approval_id``.

        Raises:
            PalyraError: ``APPROVAL_ALREADY_DECIDED`` when a decision (or the
                timeout) already answered it.
        """
        fut = self.expect(approval_id)
        if fut.done():
            raise coded(ErrorCode.APPROVAL_ALREADY_DECIDED,
                        f"approval {approval_id} is already decided", approval_id=approval_id)
        ack: asyncio.Future[ApprovalRecord] = asyncio.get_running_loop().create_future()
        self._acks[approval_id] = ack
        fut.set_result(decision)
        return ack

    def retract(self, approval_id: str) -> None:
        """Forget the decision taken for ``approval_id`` that could not be recorded (a
        relayed one its decider withdrew): the approval is awaited again."""
        self._decisions.pop(approval_id, None)

    def resolve(self, record: ApprovalRecord) -> None:
        """The decision on ``record`` is committed: forget it and answer its decider.

        ``record`` is the row as stored (``records.redacted``): the decider's answer
        goes to the caller as it is.
        """
        self._decisions.pop(record.approval_id, None)
        ack = self._acks.pop(record.approval_id, None)
        if ack is not None and not ack.done():
            ack.set_result(record)

    def close(self, parking: bool) -> None:
        """The run stopped: fail every decider still waiting, cancel every wait."""
        self._closed = True
        for approval_id in self._decisions:
            self._pending.discard(approval_id)
        for approval_id, ack in self._acks.items():
            if not ack.done():
                ack.set_exception(coded(
                    ErrorCode.UNAVAILABLE if parking else ErrorCode.RUN_TERMINAL,
                    f"the run ended before decision on {approval_id} was recorded",
                    approval_id=approval_id))
        for fut in self._decisions.values():
            if not fut.done():
                fut.cancel()


class Step:
    """The mutable state of one run's work (see the module docstring)."""

    def __init__(self, deps: EngineDeps, writer: RunWriter,
                 unknown_inflight: frozenset[str] = frozenset()) -> None:
        self.deps = deps
        self.writer = writer
        self.mailbox = ApprovalMailbox(deps.pending)
        self.phase: Phase = "idle"
        # Set by the actor when the daemon parks the run: the loop stops between steps.
        self.parking = False
        self._carry: Batch | None = None
        self._active_s = 0.0
        # The wall-clock limit over model calls: one timer for the run, not one a call.
        self.deadline = RunDeadline()
        # Proposals allowed before a restart with no result on the tape: the
        # tool may or may not have run, so only read-only tools are re-run.
        self._unknown_inflight = set(unknown_inflight)

    @property
    def record(self) -> RunRecord:
        """The run's committed record."""
        return self.writer.record

    @property
    def run_id(self) -> str:
        """The run this step works for."""
        return self.writer.record.run_id

    # -- the carry batch ---------------------------------------------------
    def carry(self, batch: Batch | None) -> None:
        """Remember ``batch`` as taped-but-uncommitted (None: nothing is carried)."""
        self._carry = batch

    def take_carry(self) -> Batch | None:
        """The carried batch, once; the finaliser commits it with the run's end."""
        batch, self._carry = self._carry, None
        return batch

    # -- the active-time clock ---------------------------------------------
    def new_loop(self) -> None:
        """A new agent loop starts: its wall-clock budget starts full."""
        self._active_s = 0.0

    def active(self) -> _Active:
        """Count the block's wall time against the loop's budget (``with step.active():``)."""
        return _Active(self)

    def remaining_wall_s(self) -> float:
        """Active wall-clock budget left for the current agent loop."""
        return self.deps.config.max_wall_s - self._active_s

    # -- crash-restart bookkeeping -----------------------------------------
    def was_in_flight(self, proposal_id: str) -> bool:
        """True once for a call allowed before a restart with no result taped."""
        if proposal_id in self._unknown_inflight:
            self._unknown_inflight.discard(proposal_id)
            return True
        return False


class _Active:
    """The block of ``Step.active``: its wall time counts against the loop's budget.

    A plain class rather than a ``@contextmanager`` generator: every model call and
    every tool run enters one, and the generator's wrapper, its ``next`` calls and
    its frame cost five Python calls more each time.
    """

    __slots__ = ("_started", "_step")

    def __init__(self, step: Step) -> None:
        self._step = step
        self._started = 0.0

    def __enter__(self) -> None:
        self._started = time.monotonic()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._step._active_s += time.monotonic() - self._started
