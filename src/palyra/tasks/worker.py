"""Workers: claim a task, run its handler, keep the lease alive, hear a cancel.

A worker loop waits in :meth:`TaskQueue.claim` (woken by the queue, never
polling), runs the handler registered for the task's kind, and meanwhile
heartbeats every ``0.8 x`` the lease. A heartbeat that finds the task
``cancel_requested`` cancels the handler; one refused as ``LEASE_STALE``
means the task moved on without this worker (its lease lapsed), so the
handler is cancelled and nothing more is written with that epoch.

One timer per worker covers all its claims in flight (most end well inside a
lease, so it rarely renews anything). Every task runs in an asyncio task of its
own, made with a fresh copy of the worker's context (handlers bind log context, a
run's id, that must not reach the tasks after it), and its handler is awaited
there. A worker loop is a *slot*, not a long-lived asyncio task: its claim is
answered straight into a new task running the claimed one (``_Next``), which
begins the slot's next claim as its handler ends. So a task costs one asyncio task
and its wake-ups, not a claim future's wake-up, a handler task and its completion's.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable, Collection, Coroutine, Mapping
from dataclasses import dataclass
from types import CoroutineType
from typing import Any, Protocol, cast

import msgspec

from palyra.core.errors import ErrorCode, PalyraError
from palyra.core.ids import new_ulid
from palyra.tasks import model
from palyra.tasks.model import State, TaskRecord
from palyra.tasks.queue import (
    ClaimAnswer,
    FollowUp,
    LostClaim,
    Ride,
    StagedSuccess,
    TaskQueue,
)

log = logging.getLogger("palyra.tasks")

ADOPT_FACTOR = 4


@dataclass(frozen=True, slots=True)
class TaskContext:
    """What a handler gets: the task as claimed and its decoded payload."""

    task: TaskRecord
    payload: dict[str, Any]
    #: Lays the task's success (its result, the tasks it hands on, the worker's next
    #: claim) out for an append the handler makes, or None: the worker commits it after
    #: the handler as usual (see :meth:`TaskQueue.stage_success`). Once that append has
    #: landed the handler's own result is not committed again. None: not offered (the
    #: task's kind is not among the worker's ``staging`` kinds, or nothing is to offer).
    stage_success: StageSuccess | None = None


@dataclass(frozen=True, slots=True)
class Done:
    """A handler's result and the tasks it hands on, queued in the commit of its success."""

    result: dict[str, Any] | None
    then: tuple[FollowUp, ...] = ()


StageSuccess = Callable[[dict[str, Any] | None, tuple[FollowUp, ...]], StagedSuccess | None]
"""``(result, follow-ups)`` -> the success staged for the handler's own append, or None."""

Handler = Callable[[TaskContext], Awaitable[dict[str, Any] | Done | None]]
"""Runs one task; returns its result (JSON-able, or :class:`Done` with follow-up tasks)
or raises to fail the attempt."""


class ClaimNext(Protocol):
    """Begins a worker loop's next claim (``ride``: the queue begins it in the commit of
    the success about to be queued) and gives its answer."""

    def __call__(self, ride: bool = False) -> ClaimAnswer: ...


class TaskWorker:
    """``concurrency`` loops over one queue for the kinds in ``handlers``.

    ``staging``: the kinds whose handlers stage their success in an append of their own
    (:attr:`TaskContext.stage_success`); only those get one, as laying it out costs a
    closure and its state for every task (a channel dispatch's, today; no other asks).
    """

    def __init__(self, queue: TaskQueue, handlers: Mapping[str, Handler], *,
                 lease_ms: int = model.DEFAULT_LEASE_MS, concurrency: int = 1,
                 owner: str = "", hand_to: Mapping[str, TaskWorker] | None = None,
                 staging: Collection[str] = ()) -> None:
        self._queue = queue
        self._handlers = dict(handlers)
        self._kinds = frozenset(self._handlers)
        self._staging = frozenset(staging) & self._kinds
        self._lease_ms = lease_ms
        self._concurrency = max(1, concurrency)
        self.owner = owner or f"worker:{new_ulid()}"
        self._started = False
        self._closing = False
        # The slots' claims in line (or riding a success's commit), and the tasks their
        # claims started (each running one claimed task).
        self._claims: set[_Next] = set()
        self._running: set[asyncio.Task[None]] = set()
        # The context every task's run starts from (a copy each): the one ``start`` ran in.
        self._context = contextvars.Context()
        # The loop the worker runs on, once started: each task's handler and heartbeat
        # timer are made on it without asking asyncio (a getpid() call per ask here).
        self._loop: asyncio.AbstractEventLoop | None = None
        # Follow-ups of these kinds go straight to that worker, born claimed by it.
        self._hand_to = dict(hand_to or {})
        self._adopted: set[asyncio.Task[None]] = set()
        self._heartbeats: _Heartbeats | None = None

    @property
    def lease_ms(self) -> int:
        """The lease this worker's claims run under."""
        return self._lease_ms

    def can_adopt(self) -> bool:
        """Whether this worker runs a handed-on task now (its loops run, and the tasks it
        took this way stay within a few times its concurrency: past that they queue)."""
        return self._serving() and len(self._adopted) < ADOPT_FACTOR * self._concurrency

    def _serving(self) -> bool:
        return self._started and not self._closing

    def adopt(self, task: TaskRecord) -> None:
        """Run ``task``, claimed for this worker by another's success, under its lease
        (a worker closed meanwhile leaves it: the lease lapses and it is retried)."""
        if not self._serving():
            return
        run = asyncio.ensure_future(self._run_adopted(task))
        self._adopted.add(run)
        run.add_done_callback(self._adopted.discard)

    def _handing_on(self, follow: FollowUp) -> FollowUp:
        taker = self._hand_to.get(follow.kind)
        if taker is None or not taker.can_adopt():
            return follow
        return follow.claimed_for(taker.owner, taker._lease_ms)

    async def _run_adopted(self, task: TaskRecord) -> None:
        try:
            await self.run_one(task, inline=True)
        except asyncio.CancelledError:
            raise
        except Exception:  # a queue write failed: the lease lapses, the task is retried
            log.exception("task %s: could not record its outcome", task.task_id)

    def start(self) -> None:
        """Start the loops (no-op without handlers)."""
        if not self._handlers or self._started:
            return
        self._loop = asyncio.get_running_loop()
        self._context = contextvars.copy_context()
        self._started = True
        for _ in range(self._concurrency):
            self._claim()

    async def close(self) -> None:
        """Stop the loops; a task in hand keeps its lease, which lapses (or recovery takes it).

        So does a task a loop claimed ahead while its last outcome was committing.
        """
        self._closing = True
        for ahead in list(self._claims):  # stopping: a claim still in line leaves it
            ahead.cancel()
        self._claims.clear()
        running = [*self._running, *self._adopted]
        for task in running:
            task.cancel()
        for task in running:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._heartbeats is not None:
            self._heartbeats.close()

    def _claim(self, ride: bool = False) -> _Next:
        """A slot's next claim, begun now (``ride``: the queue begins it in the commit of
        the success about to be queued, a :class:`Ride` carrying it)."""
        ahead = _Next(self)
        if self._closing:
            ahead.cancel()
            return ahead
        self._claims.add(ahead)
        if not ride:
            try:
                self._queue.claim_answering(self.owner, self._kinds, self._lease_ms, ahead)
            except Exception as exc:  # the journal refused it (closed): the slot stops
                ahead.set_exception(exc)
        return ahead

    def _claimed(self, ahead: _Next, task: TaskRecord) -> None:
        """A slot's claim is durable: run the task in an asyncio task of its own."""
        self._claims.discard(ahead)
        assert self._loop is not None
        run = self._loop.create_task(self._run_claimed(task), context=self._context.copy())
        self._running.add(run)

    def _refused(self, ahead: _Next, error: BaseException) -> None:
        """A slot's claim failed: looked for again after a lost commit; else the slot stops
        (the journal closed under the worker)."""
        self._claims.discard(ahead)
        if self._closing:
            return
        if isinstance(error, LostClaim):
            self._claim()
            return
        log.warning("a task worker's claim failed; one of its loops stops: %s", error)

    async def _run_claimed(self, task: TaskRecord) -> None:
        ahead: _Next | None = None

        def claim_next(ride: bool = False) -> _Next:
            # Begun when the handler is done, before its outcome is queued: the next
            # claim shares the outcome's group commit (or waits in line, where an
            # enqueue hands it a task born claimed), instead of following it. After a
            # success it rides in that success's own commit (``ride``: the queue begins
            # it there, with this answer).
            nonlocal ahead
            ahead = self._claim(ride)
            return ahead

        try:
            await self.run_one(task, claim_next, inline=True)
        except asyncio.CancelledError:
            raise
        except Exception:  # a queue write failed: the lease lapses, the task is retried
            log.exception("task %s: could not record its outcome", task.task_id)
        finally:
            me = asyncio.current_task(self._loop)
            if me is not None:
                self._running.discard(me)
            if ahead is None:  # the lease was lost, or the outcome failed: claim again
                self._claim()

    async def run_one(self, task: TaskRecord, claim_next: ClaimNext | None = None, *,
                      inline: bool = False) -> TaskRecord | None:
        """Run a claimed task to its recorded outcome (None: the lease was lost).

        ``claim_next`` is called once the handler is done (not when the worker is
        stopping), just before the outcome is queued to the journal; after a success
        with ``ride=True``, and the claim it answers rides in the success's commit.
        ``inline``: the calling asyncio task is this task's own (it ends with it), so
        the handler is awaited in it rather than in a task of its own.
        """
        handler = self._handlers[task.kind]
        payload = msgspec.json.decode(task.payload_json) if task.payload_json else {}
        loop = self._loop or asyncio.get_running_loop()
        beats = self._heartbeats
        if beats is None:
            beats = self._heartbeats = _Heartbeats(self, loop)
        # What the handler staged (at most one success) and its heartbeat claim: built
        # only for a kind that stages (see ``staging``), the rest never look.
        staged: list[StagedSuccess] | tuple[()] = ()
        watched: list[_Claim] | None = None
        if task.kind in self._staging:
            staged, watched = [], []
            step = handler(TaskContext(task, payload, self._stager(task, claim_next, beats,
                                                                   staged, watched)))
        else:
            step = handler(TaskContext(task, payload))
        runner = asyncio.current_task(loop) if inline else None
        # An ``async def`` handler's coroutine, told by its class (asyncio.iscoroutine
        # is a Python call, twice per task here); anything else takes the general way.
        coroutine = step.__class__ is CoroutineType or asyncio.iscoroutine(step)
        work: asyncio.Future[Any]
        if runner is not None and coroutine:
            work = runner  # a heard cancel cancels this task, inside the handler's await
        else:
            runner = None
            step = work = (loop.create_task(cast("Coroutine[Any, Any, Any]", step)) if coroutine
                           else asyncio.ensure_future(step))
        claim = beats.watch(task, work)
        if watched is not None:
            watched.append(claim)
        try:
            result = await step
        except asyncio.CancelledError:
            beats.forget(claim)
            heard = claim.lost or claim.cancel_heard
            if heard and runner is not None:
                runner.uncancel()  # the heartbeat's cancel of this very task, handled here
            current = asyncio.current_task()
            if not heard or (current is not None and current.cancelling()):
                # The worker itself is stopping (maybe in the same instant as a heard
                # cancel): the stop wins and the lease lapses; swallowed, a worker's
                # close would wait for a loop that carried on.
                raise
            if claim.lost:
                return None  # the task moved on without us: write nothing
            # The heartbeat heard a cancel request: record it (cancel_requested -> cancelled).
            return await self._failed(task, claim_next, staged, "cancelled")
        except Exception as exc:
            beats.forget(claim)
            return await self._failed(task, claim_next, staged, f"{type(exc).__name__}: {exc}")
        beats.forget(claim)
        if runner is not None and (claim.lost or claim.cancel_heard):
            runner.uncancel()  # the handler swallowed the heartbeat's cancel
        if staged and (ended := await self._staged_end(staged[0])) is not None:
            return ended
        value, then = self._outcome(result)
        # Begun by the queue whatever the success's fate (see Ride); a staged success
        # began it already, landed or not.
        ride = None if claim_next is None or staged else Ride(
            self.owner, self._kinds, self._lease_ms, claim_next(True))
        try:
            rec, claimed = await self._queue.succeed_handing_on(
                task.task_id, task.lease_epoch, value, then, ride=ride)
        except PalyraError as exc:
            if exc.code is ErrorCode.LEASE_STALE:
                log.info("task outcome dropped: %s", exc.message)
                return None
            raise
        for handed in claimed:
            self._hand_to[handed.kind].adopt(handed)
        return rec

    def _outcome(self, result: dict[str, Any] | Done | None
                 ) -> tuple[dict[str, Any] | None, tuple[FollowUp, ...]]:
        """A handler's result and the follow-ups it hands on, each to its taker (a plain
        result is not wrapped in a Done first: a frozen dataclass's init per task)."""
        if not isinstance(result, Done):
            return result, ()
        return result.result, (tuple(self._handing_on(f) for f in result.then)
                               if result.then else ())

    def _stager(self, task: TaskRecord, claim_next: ClaimNext | None, beats: _Heartbeats,
                staged: list[StagedSuccess], watched: list[_Claim]) -> StageSuccess:
        """``task``'s :attr:`TaskContext.stage_success` (what it stages goes in ``staged``;
        ``watched``: its heartbeat claim, forgotten once the success landed)."""

        def ride() -> Ride | None:
            return None if claim_next is None else Ride(
                self.owner, self._kinds, self._lease_ms, claim_next(True))

        def landed(answer: asyncio.Future[TaskRecord]) -> None:
            # The task is no longer this worker's: no heartbeat renews it.
            if watched and answer.exception() is None:
                beats.forget(watched[0])

        def stage_success(result: dict[str, Any] | None, then: tuple[FollowUp, ...]
                          ) -> StagedSuccess | None:
            if staged:
                return None
            out = self._queue.stage_success(task.task_id, task.lease_epoch, result,
                                            tuple(self._handing_on(f) for f in then), ride)
            if out is not None:
                staged.append(out)
                out.answer.add_done_callback(landed)
            return out

        return stage_success

    async def _failed(self, task: TaskRecord, claim_next: ClaimNext | None,
                      staged: list[StagedSuccess] | tuple[()], error: str) -> TaskRecord | None:
        """Record a failed attempt, unless the handler's staged success landed already."""
        if staged:  # its ride was begun with it: no claim_next here
            ended = await self._staged_end(staged[0])
            if ended is not None:
                log.warning("task %s: the handler failed after its success was committed: "
                            "%s", task.task_id, error)
                return ended
        elif claim_next is not None:
            claim_next()
        return await self._finish(self._queue.fail(task.task_id, task.lease_epoch, error))

    async def _staged_end(self, staged: StagedSuccess) -> TaskRecord | None:
        """The task's record if the success its handler staged landed (the tasks it
        handed on then run), else None (the worker records the outcome itself)."""
        if not staged.answer.done():  # it landed before the run's end woke the handler
            await asyncio.wait([staged.answer])
        if staged.answer.exception() is not None:
            return None
        for handed in staged.handed_on:
            self._hand_to[handed.kind].adopt(handed)
        return staged.record

    @staticmethod
    async def _finish(write: Awaitable[TaskRecord]) -> TaskRecord | None:
        try:
            return await write
        except PalyraError as exc:
            if exc.code is ErrorCode.LEASE_STALE:
                log.info("task outcome dropped: %s", exc.message)
                return None
            raise


class _Next:
    """A worker slot's claim: answered by the queue as a future would be, it starts the
    claimed task's run at once (no future to wake a waiting loop)."""

    __slots__ = ("_done", "_worker")

    def __init__(self, worker: TaskWorker) -> None:
        self._worker = worker
        self._done = False

    def done(self) -> bool:
        """True once answered or cancelled."""
        return self._done

    def cancel(self) -> None:
        """The worker is stopping: an answer that comes is dropped (its lease lapses)."""
        self._done = True

    def set_result(self, task: TaskRecord, /) -> None:
        """The claim is durable: the task runs."""
        if not self._done:
            self._done = True
            self._worker._claimed(self, task)

    def set_exception(self, exception: BaseException, /) -> None:
        """The claim failed."""
        if not self._done:
            self._done = True
            self._worker._refused(self, exception)


@dataclass(slots=True, eq=False)
class _Claim:
    """A task in a worker's hands, as its heartbeats see it."""

    task: TaskRecord
    work: asyncio.Future[Any]  # what a heard cancel (or a lost lease) cancels
    due: float  # the loop's time of its next renewal
    beat: asyncio.Task[None] | None = None  # a renewal in flight
    ended: bool = False
    lost: bool = False
    cancel_heard: bool = False


class _Heartbeats:
    """Renews the leases of a worker's claims in flight, each every ``0.8 x`` lease.

    One timer for the worker, set for the claim due first: claims are kept in the
    order they fall due (a claim's next renewal is always the latest), and most end
    before theirs, so the timer mostly finds nothing to do and moves on to the next.
    A renewal that finds the task ``cancel_requested`` cancels its work
    (``cancel_heard``); one refused as ``LEASE_STALE`` cancels it too (``lost``: the
    task moved on without this worker, which must write nothing more).
    """

    def __init__(self, worker: TaskWorker, loop: asyncio.AbstractEventLoop) -> None:
        self._worker = worker
        self._interval = worker._lease_ms * model.HEARTBEAT_FRACTION / 1000
        self._loop = loop
        self._claims: dict[tuple[str, int], _Claim] = {}  # in due order
        self._timer: asyncio.TimerHandle | None = None

    def watch(self, task: TaskRecord, work: asyncio.Future[Any]) -> _Claim:
        """Renew ``task``'s lease while ``work`` runs, until :meth:`forget`."""
        claim = _Claim(task, work, self._loop.time() + self._interval)
        self._claims[(task.task_id, task.lease_epoch)] = claim
        if self._timer is None:
            self._timer = self._loop.call_at(claim.due, self._due)
        return claim

    def forget(self, claim: _Claim) -> None:
        """The work ended: no more renewals (the timer, if set for it, moves on)."""
        claim.ended = True
        self._claims.pop((claim.task.task_id, claim.task.lease_epoch), None)
        if claim.beat is not None:
            claim.beat.cancel()
            claim.beat = None

    def close(self) -> None:
        """The worker stopped: its timer goes (a claim watched later sets it again)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _due(self) -> None:
        self._timer = None
        now = self._loop.time()
        due = []
        for claim in self._claims.values():
            if claim.due > now:
                break
            due.append(claim)
        for claim in due:  # back in line once renewed
            del self._claims[(claim.task.task_id, claim.task.lease_epoch)]
            if not claim.work.done():
                claim.beat = self._loop.create_task(self._renew(claim))
        self._arm()

    def _arm(self) -> None:
        if self._timer is None and self._claims:
            first = next(iter(self._claims.values()))
            self._timer = self._loop.call_at(first.due, self._due)

    async def _renew(self, claim: _Claim) -> None:
        task, queue = claim.task, self._worker._queue
        try:
            rec = await queue.heartbeat(task.task_id, task.lease_epoch, self._worker._lease_ms)
        except PalyraError as exc:
            if exc.code is ErrorCode.LEASE_STALE and not claim.ended:
                claim.lost = True
                claim.work.cancel()
                return
            log.warning("task %s: heartbeat failed: %s", task.task_id, exc.message)
        else:
            if rec.state == State.CANCEL_REQUESTED and not claim.ended:
                claim.cancel_heard = True
                claim.work.cancel()
                return
        finally:
            claim.beat = None
        if not claim.ended and not claim.work.done():
            claim.due = self._loop.time() + self._interval
            self._claims[(task.task_id, task.lease_epoch)] = claim
            self._arm()
