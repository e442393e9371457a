"""The per-run writer: every tape event and run-record change of one run.

A run's writes are serialised by one lock, so tape order equals causal order
and the in-memory ``LoopState`` always mirrors the journal. A ``Batch``
collects tape members and lifecycle transitions (checked against the
generated run machine as they are added) and commits them in one append,
with the updated run record attached as an ``EntityWrite`` of that same
append: a state change and its cause are one durable commit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import betterproto2
import msgspec
from palyra_gen.palyra import v1 as pb

from palyra.core.errors import ErrorCode, PalyraInternalError
from palyra.engine.model.errors import coded
from palyra.engine.model.fold import LoopState
from palyra.engine.model.lifecycle import (
    RunEvent,
    RunStateId,
    is_run_terminal,
    run_next,
    run_state_proto,
)
from palyra.engine.model.records import RUNS, RunRecord, encode
from palyra.engine.model.tape import DRAFTING, ENGINE_ACTOR
from palyra.engine.run.flag import Flag
from palyra.journal import (
    EntityWrite,
    EventDraft,
    JournalStore,
    Lease,
    RowExpectation,
    StoredEvent,
)


class Riding(Protocol):
    """Drafts someone else lays out for a run's ending commit, told how it went."""

    drafts: list[EventDraft]

    def land(self) -> None:
        """The run's ending commit is durable."""

    def abandon(self) -> None:
        """The run's ending commit did not happen."""


EndRider = Callable[[RunRecord, Sequence[EventDraft]], "Riding | None"]
"""Asked once, as the batch that ends the run is staged: ``(the ended record, the run's
drafts of that batch)`` -> drafts to commit with them (None: nothing rides)."""


def end_reason_on_complete(current: str) -> str:
    """``end_reason`` of a run that completes: a limit that stopped its last
    loop (``turn_limit``, ``wall_clock_limit``), else ``completed``."""
    return current or "completed"


class RunWriter:
    """Owns one run's record and loop state; commits batches in order."""

    def __init__(
        self, store: JournalStore, record: RunRecord, loop: LoopState, now_ms: Callable[[], int],
        fence: Lease | None = None,
    ) -> None:
        self.store = store
        #: The run's session lease (several daemons on one journal): every commit of
        #: the run is fenced by it, so a daemon that lost the session writes nothing.
        self.fence = fence
        self.record = record
        self.loop = loop
        self.now_ms = now_ms
        self.lock = asyncio.Lock()
        # Made by the first wait for the next commit, dropped by that commit: a run
        # nobody waits on makes no flag per commit.
        self._changed: Flag | None = None
        #: Asked for drafts to ride in the commit that ends the run (a channel dispatch's
        #: success with its replies' send task: one commit fewer per message).
        self.end_rider: EndRider | None = None

    def notify(self) -> None:
        """Wake everyone waiting in :meth:`wait_change` (after each commit)."""
        changed = self._changed
        if changed is not None:
            self._changed = None
            changed.set()

    async def wait_change(self) -> None:
        """Return after the next commit of this run."""
        changed = self._changed
        if changed is None:
            changed = self._changed = Flag()
        await changed.wait()

    @property
    def state(self) -> str:
        """The committed run state."""
        return self.record.state

    def batch(self) -> Batch:
        """A new batch starting from the committed state."""
        return Batch(self)


class Batch:
    """Tape members, transitions and extra writes committed as one append."""

    def __init__(self, writer: RunWriter) -> None:
        self._writer = writer
        self.state = writer.record.state
        self.members: list[betterproto2.Message] = []
        self.entity_writes: list[EntityWrite] = []
        self.expect: tuple[RowExpectation, ...] = ()
        self.pre_events: list[EventDraft] = []
        self.changes: dict[str, Any] = {}
        self.committed = False
        #: The event id of the batch's first tape event (a run's accept: its run id).
        self.first_event_id = ""
        self._take_input = False
        self._complete_if_requested = False
        self._on_landed: list[Callable[[], None]] = []

    def add(self, *members: betterproto2.Message) -> Batch:
        """Append tape members in order."""
        self.members.extend(members)
        return self

    def transition(self, event: str, *, message: str = "", reason: str = "") -> Batch:
        """Move the run through the generated machine and tape its status event.

        Raises:
            IllegalTransition: the run machine forbids ``event`` here.
        """
        self.state = run_next(self.state, event)
        self.members.append(pb.RunStatus(state=run_state_proto(self.state), message=message,
                                         reason=reason, event=event))
        return self

    def write(self, *writes: EntityWrite) -> Batch:
        """Attach entity writes (session, approval records) to this append."""
        self.entity_writes.extend(writes)
        return self

    def expecting(self, *rows: RowExpectation) -> Batch:
        """Commit only while each row holds the value expected (a shared journal's
        compare-and-set: a handed-over input's row is still there)."""
        self.expect = (*self.expect, *rows)
        return self

    def events(self, *drafts: EventDraft) -> Batch:
        """Prepend non-tape journal events (e.g. ``session.created``)."""
        self.pre_events.extend(drafts)
        return self

    def set(self, **changes: Any) -> Batch:
        """Change run-record fields in the same append."""
        self.changes.update(changes)
        return self

    def take_input(self) -> Batch:
        """Dequeue the oldest pending input in this append (read at commit time,
        so an input queued concurrently is never overwritten)."""
        self._take_input = True
        return self

    def on_landed(self, callback: Callable[[], None]) -> Batch:
        """Call ``callback`` the moment this append is durable (from the event loop's
        callback, before the committing task resumes): an approval's decider is answered
        then, not after the run has gone on to its next step."""
        self._on_landed.append(callback)
        return self

    def complete_if_requested(self) -> Batch:
        """This append ends the agent loop: if the client already half-closed
        and nothing is queued, complete the run in the same append."""
        self._complete_if_requested = True
        return self

    async def commit(self) -> list[StoredEvent]:
        """Commit under the run lock; see :meth:`commit_locked`."""
        async with self._writer.lock:
            return await self.commit_locked()

    async def commit_locked(self) -> list[StoredEvent]:
        """Commit; the caller holds ``writer.lock``.

        Cancellation-safe: once handed to the journal, the append lands even if
        the caller is cancelled, so the commit is shielded and awaited to its
        end before the cancellation continues; otherwise the in-memory tape
        length and loop state would drift from the journal.
        """
        staged = self.stage()
        # The queued write is tracked by its own future (no task per commit);
        # a bad draft raises here, before anything is queued.
        try:
            # Unfenced (LMDB, one daemon) exactly as before leases existed.
            fence = self._writer.fence
            if self.expect:
                task = self._writer.store.submit(staged.drafts, fence=fence,
                                                 expect=self.expect)
            else:
                task = (self._writer.store.submit(staged.drafts) if fence is None
                        else self._writer.store.submit(staged.drafts, fence=fence))
        except BaseException:
            staged.abandon()
            raise
        # Landed (or abandoned) as the append settles, before this task resumes (the
        # callback is the future's first): the record, the watchers and any
        # ``on_landed`` waiter see the commit without waiting behind this task.
        if task.done():  # settled as it was queued: awaiting it will not yield
            staged.settle(task)
        else:
            task.add_done_callback(staged.settle)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            await asyncio.wait({task})
            raise

    def stage(self) -> Staged:
        """The batch's drafts, for an append made by someone else (a cascade puts a
        child run's end in its parent's append); the caller holds ``writer.lock``
        and then calls :meth:`Staged.land` if that append landed, else
        :meth:`Staged.abandon`.

        Raises:
            PalyraError: ``RUN_TERMINAL`` when the run already ended (a step that
                was stopped because its run ended in another append).
        """
        w = self._writer
        if self.committed:
            raise PalyraInternalError("a run batch was committed twice")
        self.committed = True
        if is_run_terminal(w.record.state):
            # Nothing lands on a tape after its terminal status.
            raise coded(ErrorCode.RUN_TERMINAL, f"run {w.record.run_id} is {w.record.state}",
                        run_id=w.record.run_id)
        if self._take_input:
            self.changes["pending_inputs"] = w.record.pending_inputs[1:]
        pending = self.changes.get("pending_inputs", w.record.pending_inputs)
        if (self._complete_if_requested and w.record.complete_requested and not pending
                and self.state == RunStateId.IN_PROGRESS):
            # A loop stopped by a limit keeps its reason (``run.loop.terminate``).
            reason = end_reason_on_complete(self.changes.get("end_reason",
                                                             w.record.end_reason))
            self.transition(RunEvent.COMPLETE, message="completed", reason=reason)
            self.changes["end_reason"] = reason
        loop = w.loop
        saved = (loop.tape_len, loop.turn_count, loop.tool_call_count, loop.state,
                 loop.final_text)
        for member in self.members:
            loop.apply(member)
        loop.state = self.state
        now = w.now_ms()
        record = msgspec.structs.replace(
            w.record,
            **{
                "state": self.state,
                "tape_len": loop.tape_len,
                "turn_count": loop.turn_count,
                "tool_call_count": loop.tool_call_count,
                "final_text": loop.final_text,
                "updated_ms": now,
                # Every commit is activity unless the batch says otherwise
                # (recovery keeps the old value: a restart is not activity).
                "last_active_ms": now,
                **self.changes,
            },
        )
        drafts = self._drafts(record)
        riding = None
        if w.end_rider is not None and is_run_terminal(self.state):
            rider, w.end_rider = w.end_rider, None  # asked once, whatever it answers
            riding = rider(record, drafts)
            if riding is not None:
                drafts += riding.drafts
        return Staged(w, record, saved, drafts, self._on_landed, riding)

    def _drafts(self, record: RunRecord) -> list[EventDraft]:
        run_write = EntityWrite(RUNS, record.run_id, encode(record))
        writes: Sequence[EntityWrite] = (*self.entity_writes, run_write)
        drafts = list(self.pre_events)
        members = self.members
        if members:
            # The rows ride on the last event and the given id (a run's first event is
            # named after the run) on the first, each built with them: no copy.
            last, event_id = len(members) - 1, self.first_event_id
            for i, member in enumerate(members):
                drafts.append(tape_draft(record, member, writes if i == last else (), event_id))
                event_id = ""
        elif drafts:
            drafts[-1] = drafts[-1].with_writes(*writes)
        else:
            drafts.append(EventDraft(kind="run.updated", actor=ENGINE_ACTOR,
                                     session_id=record.session_id, run_id=record.run_id,
                                     entity_writes=writes))
        return drafts


def tape_draft(record: RunRecord, member: betterproto2.Message,
               writes: Sequence[EntityWrite] = (), event_id: str = "") -> EventDraft:
    """An ``EventDraft`` that puts ``member`` on ``record``'s tape (with ``writes``, and
    ``event_id`` if given; else the journal assigns one)."""
    ident = record.identity
    kind, encode = DRAFTING[member.__class__]  # kind_of and payload_of, one lookup
    return EventDraft(kind=kind, actor=ENGINE_ACTOR, session_id=record.session_id,
                      run_id=record.run_id, tape=True, payload=encode(member),
                      principal=ident.principal, device_id=ident.device_id,
                      channel=ident.channel, event_id=event_id, entity_writes=writes,
                      origin=member)


class Staged:
    """A batch laid out as drafts, waiting for its append (see :meth:`Batch.stage`).

    The loop state already folds its members; the run record moves only once
    the append is known to have landed.
    """

    def __init__(self, writer: RunWriter, record: RunRecord,
                 saved: tuple[int, int, int, str, str], drafts: list[EventDraft],
                 on_landed: Sequence[Callable[[], None]] = (),
                 riding: Riding | None = None) -> None:
        self._writer = writer
        self.record = record
        self._saved = saved
        self.drafts = drafts
        self._on_landed = on_landed
        self._riding = riding

    def land(self) -> None:
        """The append is durable: the committed record is the new one."""
        self._writer.record = self.record
        if self._riding is not None:  # before the run's waiters hear of its end
            self._riding.land()
        self._writer.notify()
        for callback in self._on_landed:
            callback()

    def abandon(self) -> None:
        """The append did not happen: the loop state goes back to the committed record."""
        loop = self._writer.loop
        (loop.tape_len, loop.turn_count, loop.tool_call_count, loop.state,
         loop.final_text) = self._saved
        if self._riding is not None:
            self._riding.abandon()

    def settle(self, task: asyncio.Future[list[StoredEvent]]) -> None:
        """Land or abandon by how the submitted append ended."""
        if task.done() and not task.cancelled() and task.exception() is None:
            self.land()
        else:
            self.abandon()
