"""The durable task queue: every change one journal commit, wake-ups without polling.

Tasks live in the journal's ``tasks`` table (``id:<task_id>``, and
``idem:<key>`` -> task id for idempotent enqueues). Each change is the pure
function of :mod:`palyra.tasks.model` it names, journaled as one
``task.<event>`` event with the new row in the same commit; memory follows
only after the commit is durable, so a crash at any instant leaves the journal
and the next start's memory in agreement.

This process is the journal's only writer, so the queue keeps every unfinished
task in memory (finished ones are read from the table on demand). Claims wait
on an :class:`asyncio.Condition` that every enqueue, release and cancel
notifies; the one timer sleeps exactly until the next deadline (a task's
``not_before``, a lease's expiry, an ``expires_at``), never on a fixed period.

Recovery (``start``) treats every lease as dead (the writer lock means no
other process holds one) and every lapsed deadline as due: each task moves at
most once, each move is its own commit, and running it again after a crash in
the middle finds nothing left to move for the tasks already done.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from palyra.core.errors import ErrorCode, InvalidArgument, NotFound, PalyraError
from palyra.core.ids import UlidSequence
from palyra.journal import EntityWrite, EventDraft, JournalStore
from palyra.tasks import model
from palyra.tasks.index import LiveTasks
from palyra.tasks.model import Outcome, State, TaskRecord

log = logging.getLogger("palyra.tasks")

TABLE = "tasks"
_ID = "id:"
_IDEM = "idem:"
ACTOR = "system:tasks"
MAX_KIND = 64
MAX_PAYLOAD = 64 * 1024
MAX_KEY = 200


@dataclass(frozen=True, slots=True)
class FollowUp:
    """A task a finishing task queues in the commit of its own success (so the work it
    hands on is never lost between two commits, and costs none of its own)."""

    kind: str
    idempotency_key: str  # required: a success retried after a crash queues it once
    payload: dict[str, Any] = field(default_factory=dict)
    max_attempts: int = model.DEFAULT_MAX_ATTEMPTS
    # A worker that takes it at once: it is born claimed by this owner (its first
    # attempt), in the same commit, so no claim commit and no wake-up of other workers.
    claim_for: str = ""
    lease_ms: int = model.DEFAULT_LEASE_MS


def wall_ms() -> int:
    """Milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


class TaskQueue:
    """Enqueue, claim under a lease, heartbeat, finish, cancel, recover."""

    def __init__(self, store: JournalStore, *, now_ms: Callable[[], int] = wall_ms) -> None:
        self._store = store
        self._now = now_ms
        self._live = LiveTasks()  # every unfinished task, indexed
        self._lock = asyncio.Lock()
        self._changed = asyncio.Condition()
        self._timer: asyncio.Task[None] | None = None
        self._timer_wake = asyncio.Event()
        self._ids = UlidSequence()  # task ids sort in enqueue order (ties on time)
        self.commits = 0
        self.stale_refusals = 0  # updates refused for a stale lease epoch (/metrics)

    # -- lifetime ------------------------------------------------------------
    async def start(self) -> list[TaskRecord]:
        """Load unfinished tasks, recover them, start the deadline timer.

        Returns the tasks recovery moved (each in its own commit).
        """
        self._live = LiveTasks(rec for rec in self._scan() if not rec.final)
        moved = []
        async with self._lock:
            for rec in sorted(self._live, key=lambda r: r.task_id):
                new = model.recover(rec, self._now(), owner_alive=False)
                if new is not rec:
                    await self._commit(new, "recovered")
                    moved.append(new)
        self._timer = asyncio.ensure_future(self._deadlines())
        await self._notify()
        return moved

    async def close(self) -> None:
        """Stop the timer (leases stay in the journal; the next start recovers them)."""
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
            self._timer = None

    # -- reads ---------------------------------------------------------------
    def get(self, task_id: str) -> TaskRecord | None:
        """The task, from memory if unfinished, else from the table."""
        rec = self._live.get(task_id)
        if rec is not None:
            return rec
        raw = self._store.get_entity(TABLE, _ID + task_id) if task_id else None
        return model.decode(raw) if raw is not None else None

    def require(self, task_id: str) -> TaskRecord:
        """The task.

        Raises:
            NotFound: no such task.
        """
        rec = self.get(task_id)
        if rec is None:
            raise NotFound(f"no task {task_id}", details={"task_id": task_id})
        return rec

    def leased(self) -> list[TaskRecord]:
        """Tasks a worker holds now (from memory; no table scan)."""
        return self._live.leased()

    def page(self, *, state: str = "", kind: str = "", parent_run_id: str = "",
             after_task_id: str = "", limit: int = 100) -> tuple[list[TaskRecord], str]:
        """Newest first (task ids are ULIDs); ``(page, next_after_task_id)``."""
        rows = [rec for rec in self._scan()
                if (not state or rec.state == state) and (not kind or rec.kind == kind)
                and (not parent_run_id or rec.parent_run_id == parent_run_id)]
        rows.sort(key=lambda r: r.task_id, reverse=True)
        if after_task_id:
            rows = [r for r in rows if r.task_id < after_task_id]
        page = rows[:limit]
        return page, (page[-1].task_id if len(rows) > limit else "")

    def _scan(self) -> Iterable[TaskRecord]:
        after = ""
        while True:
            rows = self._store.scan_entities(TABLE, _ID, after, 1000)
            for _key, value in rows:
                yield model.decode(value)
            if len(rows) < 1000:
                return
            after = rows[-1][0]

    # -- writes --------------------------------------------------------------
    async def enqueue(self, kind: str, *, payload: dict[str, Any] | None = None,
                      priority: int = 0, delay_ms: int = 0, ttl_ms: int = 0,
                      max_attempts: int = model.DEFAULT_MAX_ATTEMPTS, parent_run_id: str = "",
                      idempotency_key: str = "", debounce: model.Debounce | None = None,
                      also: Callable[[TaskRecord], Sequence[EventDraft]] | None = None,
                      ) -> tuple[TaskRecord, bool]:
        """Queue a task; ``(task, created)``. A known ``idempotency_key`` returns its task.

        With ``debounce``, ``payload`` is one item: it joins the queued task of the
        same key (``created`` False) while that one waits and has room, so a burst
        becomes one task whose payload is ``{"items": [...]}``, run ``quiet_ms`` after
        the last item and never later than ``max_wait_ms`` after the first.

        ``also`` gives journal drafts that must land *in the same commit* as the
        task's row (e.g. a channel message and its dedupe key), from the task as it
        will be stored; nothing is written when the key was already known.

        Raises:
            InvalidArgument: an empty or long kind, a payload over 64 KiB, a long key.
        """
        payload_json = _checked(kind, idempotency_key, payload)
        async with self._lock:
            if idempotency_key:
                known = self._store.get_entity(TABLE, _IDEM + idempotency_key)
                if known is not None:
                    return self.require(known.decode()), False
            now = self._now()
            if debounce is not None:
                for live in self._live.debouncing(debounce.key):
                    joined = model.coalesce(live, payload or {}, now, debounce)
                    if joined is not None and joined.kind == kind:
                        await self._commit(joined, "coalesced", also=also)
                        self._timer_wake.set()
                        return joined, False
                rec = model.debounced_task(
                    self._ids.next(now), kind, now, payload or {}, debounce, priority=priority,
                    expires_at_ms=now + ttl_ms if ttl_ms > 0 else 0,
                    max_attempts=max_attempts, parent_run_id=parent_run_id)
            else:
                rec = model.new_task(
                    self._ids.next(now), kind, now, payload_json=payload_json, priority=priority,
                    not_before_ms=now + delay_ms if delay_ms > 0 else 0,
                    expires_at_ms=now + ttl_ms if ttl_ms > 0 else 0,
                    max_attempts=max_attempts, parent_run_id=parent_run_id,
                    idempotency_key=idempotency_key)
            extra = (EntityWrite(TABLE, _IDEM + idempotency_key, rec.task_id.encode()),
                     ) if idempotency_key else ()
            await self._commit(rec, "enqueued", extra, also=also)
        await self._notify()
        return rec, True

    async def claim(self, owner: str, kinds: frozenset[str] | None = None,
                    lease_ms: int = model.DEFAULT_LEASE_MS) -> TaskRecord:
        """Wait for the best ready task of ``kinds`` and take it under a new lease.

        Best: highest priority, then the earliest due, then the oldest.
        """
        while True:
            async with self._changed:
                pick = self._best(kinds)
                if pick is None:
                    await self._changed.wait()
                    continue
            async with self._lock:
                rec = self._live.get(pick.task_id)
                if rec is None or not model.is_ready(rec, self._now()):
                    continue  # another claimer or a cancel got there first
                claimed = model.claim(rec, owner, self._now(), lease_ms)
                await self._commit(claimed, "claimed")
            self._timer_wake.set()
            return claimed

    def _best(self, kinds: frozenset[str] | None) -> TaskRecord | None:
        return self._live.best(kinds, self._now())

    async def heartbeat(self, task_id: str, epoch: int,
                        lease_ms: int = model.DEFAULT_LEASE_MS) -> TaskRecord:
        """Renew a lease; the answer's ``state`` says whether a cancel was asked for.

        Raises:
            PalyraError: ``LEASE_STALE`` when ``epoch`` is not the task's lease.
        """
        async with self._lock:
            with self._counting_stale():
                rec = model.heartbeat(self.require(task_id), epoch, self._now(), lease_ms)
            await self._commit(rec, "heartbeat")
        self._timer_wake.set()
        return rec

    async def succeed(self, task_id: str, epoch: int, result: dict[str, Any] | None = None,
                      then: Sequence[FollowUp] = ()) -> TaskRecord:
        """Finish a task (``LEASE_STALE`` if the lease moved on), queueing ``then`` in the
        same commit (each once per idempotency key, as :meth:`enqueue` does).

        Raises:
            InvalidArgument: a follow-up's kind, key or payload is out of bounds.
        """
        return (await self.succeed_handing_on(task_id, epoch, result, then))[0]

    async def succeed_handing_on(self, task_id: str, epoch: int,
                                 result: dict[str, Any] | None = None,
                                 then: Sequence[FollowUp] = ()
                                 ) -> tuple[TaskRecord, list[TaskRecord]]:
        """:meth:`succeed`, and the follow-ups born claimed (``claim_for``), for the caller
        to run under their leases.

        Raises:
            InvalidArgument: as :meth:`succeed`.
        """
        if any(not f.idempotency_key for f in then):
            raise InvalidArgument("a follow-up task needs an idempotency_key")
        payloads = [_checked(f.kind, f.idempotency_key, f.payload) for f in then]
        async with self._lock:
            with self._counting_stale():
                rec = model.succeed(self.require(task_id), epoch, self._now(),
                                    msgspec.json.encode(result).decode() if result else "")
            now, queued, seen = self._now(), [], set()
            drafts: list[EventDraft] = []
            for follow, payload_json in zip(then, payloads, strict=True):
                key = follow.idempotency_key
                if key in seen or self._store.get_entity(TABLE, _IDEM + key) is not None:
                    continue
                seen.add(key)
                new = model.new_task(self._ids.next(now), follow.kind, now,
                                     payload_json=payload_json,
                                     max_attempts=follow.max_attempts, idempotency_key=key)
                idem = (EntityWrite(TABLE, _IDEM + key, new.task_id.encode()),)
                if follow.claim_for:
                    # Both moves journaled, each as it happened; the row written once,
                    # as claimed.
                    taken = model.claim(new, follow.claim_for, now, follow.lease_ms)
                    drafts += [_event(new, "enqueued", (EntityWrite(
                        TABLE, _ID + taken.task_id, model.encode(taken)), *idem)),
                        _event(taken, "claimed")]
                    new = taken
                else:
                    drafts.append(_draft(new, "enqueued", idem))
                queued.append(new)
            await self._commit(rec, "succeeded", also=(lambda _rec: drafts) if drafts else None)
            for new in queued:
                self._remember(new)
        claimed = [new for new in queued if new.leased]
        if len(claimed) < len(queued):
            await self._notify()
        elif claimed:
            self._timer_wake.set()  # their leases' expiry is a deadline
        return rec, claimed

    async def fail(self, task_id: str, epoch: int, error: str) -> TaskRecord:
        """Report a failure: retried with backoff, or failed after the last attempt."""
        async with self._lock:
            with self._counting_stale():
                rec = model.fail(self.require(task_id), epoch, self._now(), error[:2000])
            await self._commit(rec, str(rec.state))
        await self._notify()
        return rec

    @contextlib.contextmanager
    def _counting_stale(self) -> Iterator[None]:
        try:
            yield
        except PalyraError as exc:
            if exc.code is ErrorCode.LEASE_STALE:
                self.stale_refusals += 1
            raise

    def depth(self) -> dict[tuple[str, str], int]:
        """Unfinished tasks by (kind, state), for ``/metrics``."""
        return dict(collections.Counter((rec.kind, str(rec.state)) for rec in self._live))

    async def cancel(self, task_id: str, reason: str) -> TaskRecord:
        """Cancel now (nobody runs it) or at the worker's next heartbeat."""
        async with self._lock:
            rec = self.require(task_id)
            new = model.request_cancel(rec, self._now(), reason[:500] or "cancelled")
            if new is not rec:
                await self._commit(new, str(new.state))
        await self._notify()
        return new

    async def lapse(self, task_id: str, reason: str) -> TaskRecord:
        """End a lease whose worker stopped heartbeating (the watchdog in ``auto`` mode):
        re-queued with backoff, or failed after its last attempt. The old epoch can
        write nothing more."""
        async with self._lock:
            rec = self.require(task_id)
            if not rec.leased:
                return rec
            new = model.release(rec, self._now(), reason, Outcome.LOST)
            await self._commit(new, "lease_lapsed")
        await self._notify()
        return new

    async def cancel_children(self, run_id: str, reason: str) -> list[TaskRecord]:
        """Cancel every unfinished task whose parent is ``run_id``."""
        children = [r.task_id for r in self._live.children(run_id)]
        return [await self.cancel(task_id, reason) for task_id in children]

    @contextlib.asynccontextmanager
    async def cancelling_children(self, run_id: str, reason: str
                                  ) -> AsyncIterator[list[EventDraft]]:
        """The journal drafts that cancel ``run_id``'s unfinished tasks, for the caller to
        commit *in the same append as the run's own end* (the cause).

        The queue stays locked until the caller's block ends, so nothing moves these
        tasks in between; memory follows only if the block ends without an error
        (the commit landed).
        """
        async with self._lock:
            now = self._now()
            moved = []
            for rec in self._live.children(run_id):
                new = model.request_cancel(rec, now, reason[:500])
                if new is not rec:
                    moved.append(new)
            yield [_draft(new, str(new.state)) for new in moved]
            for new in moved:
                self._remember(new)
        if moved:
            await self._notify()

    async def _commit(self, rec: TaskRecord, event: str,
                      extra: tuple[EntityWrite, ...] = (),
                      also: Callable[[TaskRecord], Sequence[EventDraft]] | None = None) -> None:
        # The lock is held: memory changes only after the durable commit.
        drafts = [*also(rec)] if also is not None else []
        await self._store.append([*drafts, _draft(rec, event, extra)])
        self.commits += 1
        self._remember(rec)

    def _remember(self, rec: TaskRecord) -> None:
        self._live.put(rec)

    async def _notify(self) -> None:
        self._timer_wake.set()
        async with self._changed:
            self._changed.notify_all()

    # -- deadlines -----------------------------------------------------------
    def _next_deadline(self) -> int | None:
        return self._live.next_deadline()

    async def _deadlines(self) -> None:
        """Sleep until the next deadline (or a change), then apply what is due."""
        while True:
            self._timer_wake.clear()
            due = self._next_deadline()
            timeout = None if due is None else max(0.0, (due - self._now()) / 1000)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._timer_wake.wait()
                    continue
            try:
                await self._apply_due()
            except Exception:  # a failed commit is retried at the next deadline
                log.exception("applying task deadlines failed")
                await asyncio.sleep(0.1)

    async def _apply_due(self) -> None:
        async with self._lock:
            now = self._now()
            due = self._live.due(now)
            for i, rec in enumerate(due):
                # In this process a lease ends only by running out (a hung worker).
                new = model.recover(rec, now, owner_alive=True)
                if new is rec:
                    continue  # a not_before passed: claimable now (notified below)
                try:
                    await self._commit(new, "lease_lapsed" if rec.leased else str(new.state))
                except BaseException:
                    for left in due[i:]:  # back on the timer: retried at the next wake-up
                        if self._live.get(left.task_id) is left:
                            self._live.put(left)
                    raise
        await self._notify()  # tasks whose not_before passed are claimable now


def _checked(kind: str, idempotency_key: str, payload: dict[str, Any] | None) -> str:
    """The payload as stored, once kind, key and payload are within bounds."""
    if not kind or len(kind) > MAX_KIND:
        raise InvalidArgument(f"task kind must be 1..{MAX_KIND} characters")
    if len(idempotency_key) > MAX_KEY:
        raise InvalidArgument(f"idempotency_key is longer than {MAX_KEY} characters")
    payload_json = msgspec.json.encode(payload or {}).decode()
    if len(payload_json) > MAX_PAYLOAD:
        raise InvalidArgument(f"task payload is over {MAX_PAYLOAD} bytes")
    return payload_json


def _draft(rec: TaskRecord, event: str, extra: tuple[EntityWrite, ...] = ()) -> EventDraft:
    """One task change as a journal event with the task's new row."""
    return _event(rec, event, (EntityWrite(TABLE, _ID + rec.task_id, model.encode(rec)),
                               *extra))


def _event(rec: TaskRecord, event: str, writes: tuple[EntityWrite, ...] = ()) -> EventDraft:
    """One task change as a journal event (without ``writes``: its row is another's)."""
    return EventDraft(
        kind=f"task.{event}", actor=ACTOR,
        payload={"task_id": rec.task_id, "kind": rec.kind, "state": str(rec.state),
                 "epoch": rec.lease_epoch, "owner": rec.lease_owner,
                 "attempts": rec.attempts, "error": rec.last_error},
        entity_writes=writes)


__all__ = ["FollowUp", "Outcome", "State", "TaskQueue", "TaskRecord"]
