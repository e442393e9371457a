"""The durable task queue: every change one journal commit, wake-ups without polling.

Tasks live in the journal's ``tasks`` table (``id:<task_id>``, and
``idem:<key>`` -> task id for idempotent enqueues). Each change is the pure
function of :mod:`palyra.tasks.model` it names, journaled as one
``task.<event>`` event with the new row in the same commit; memory follows
only after the commit is durable, so a crash at any instant leaves the journal
and the next start's memory in agreement.

This process is the journal's only writer, so the queue keeps every unfinished
task in memory (finished ones are read from the table on demand). Changes are
decided synchronously and never wait for each other's durability: the changes
decided in one pass of the event loop go to the journal writer as one append at
the end of the pass, and the writer's group commit puts the changes of many
producers and workers in one flush. While a task's change is being committed the task is
*held* (:class:`LiveTasks`): no claim picks it and a later change of it waits for
that commit, so each task's changes are decided on its durable state, one at a
time, in order. A claimer with nothing to take waits in line; each change that
may make a task ready hands ready tasks to waiting claimers directly (one
wake-up per task claimed, not one per claimer per enqueue). The one timer
sleeps exactly until the next deadline (a task's ``not_before``, a lease's
expiry, an ``expires_at``), never on a fixed period, and is woken only when a
change brings that deadline nearer.

Recovery (``start``) treats every lease as dead (the writer lock means no
other process holds one) and every lapsed deadline as due: each task moves at
most once, each move is its own commit, and running it again after a crash in
the middle finds nothing left to move for the tasks already done.

Several daemons on one journal (PostgreSQL, ``JournalStore.shared``) each keep this
memory, so it is no longer the only truth: every change is a compare-and-set on the
task's row inside its commit (``expect``: the row still holds the record the change
was decided on; a new task's row, and its idempotency key's, are still absent). A
change decided on a stale record fails ``STATE_CONFLICT`` and writes nothing: the
task is read again from the table and the change decided again (a claim looks for
another task; a worker whose lease moved on gets ``LEASE_STALE``). Memory follows
other daemons' task commits through the store's watcher (``on_foreign_rows``), so a
task enqueued on one daemon is claimed by whichever daemon's worker is free. There
recovery releases only leases that lapsed: another daemon's may be alive. Whether one
lapsed is read on the database server's clock (``palyra.core.clock``), as is every
instant a task carries, so a daemon whose own clock is wrong neither takes a live lease
nor keeps a dead one.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import msgspec
from palyra_gen.lifecycle.background_task import FINAL_STATES

from palyra.core.clock import store_clock, wall_ms
from palyra.core.errors import ErrorCode, InvalidArgument, NotFound, PalyraError
from palyra.core.ids import UlidSequence
from palyra.journal import EntityWrite, EventDraft, JournalStore, RowExpectation
from palyra.tasks import model
from palyra.tasks.index import LiveTasks
from palyra.tasks.line import ClaimAnswer, ClaimLine
from palyra.tasks.line import Claimer as _Claimer
from palyra.tasks.model import Outcome, State, TaskRecord
from palyra.tasks.parent import parent_alive, parent_ended

log = logging.getLogger("palyra.tasks")

TABLE = "tasks"
_ID = "id:"
_ID_END = "id;"  # the first key after every ``id:`` key (";" follows ":")
_IDEM = "idem:"
_PAGE_ROWS = 256
ACTOR = "system:tasks"
MAX_KIND = 64
MAX_PAYLOAD = 64 * 1024
MAX_KEY = 200
ENQUEUE_CONFLICTS = 32
"""How often an enqueue may be refused by a row that changed under it (another daemon
took its idempotency key, changed its parent run's row or the debounced task it joins)
and be decided again before it gives up with ``UNAVAILABLE``, retryable: a busy parent
run changes its row with each step, but not on every one of 32 decisions in a row."""


@dataclass(slots=True)
class Ride:
    """A worker's next claim, made in the commit of its last task's success.

    A worker loop claims its next task as its handler ends. Claimed on its own that
    was one more journal append per task whenever tasks queued up (``bench ingress``:
    0.65 claim appends per message); riding in the success's commit it costs one event
    and no append. ``claimed`` resolves as a claim's answer does (the claimed task, or
    ``LostClaim`` when the commit failed); when nothing is ready, or the journal is shared
    (the success's commit cannot expect another task's row), the claim is begun on its
    own instead, as :meth:`TaskQueue.claim_begin` does.
    """

    owner: str
    kinds: frozenset[str] | None
    lease_ms: int
    claimed: ClaimAnswer
    begun: bool = False  # the claim rides a commit or waits in line: nothing more to do


Change = tuple[TaskRecord, str, tuple[EntityWrite, ...]]
"""A task's new record, the event that names the change, extra rows of its commit."""


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
    # The caller knows no task of this key was ever queued (the key names work of the
    # finishing task's first attempt): its row is not looked up in the store.
    new_key: bool = False

    def claimed_for(self, owner: str, lease_ms: int) -> FollowUp:
        """This follow-up born claimed by ``owner`` under a lease of ``lease_ms``.

        ``dataclasses.replace`` without its walk over the fields (a dozen calls; one
        follow-up a channel message). A test holds it to ``replace`` field by field.
        """
        return FollowUp(kind=self.kind, idempotency_key=self.idempotency_key,
                        payload=self.payload, max_attempts=self.max_attempts,
                        claim_for=owner, lease_ms=lease_ms, new_key=self.new_key)


class TaskQueue:
    """Enqueue, claim under a lease, heartbeat, finish, cancel, recover."""

    def __init__(self, store: JournalStore, *, now_ms: Callable[[], int] = wall_ms) -> None:
        self._store = store
        # On a shared journal instants are stamped and judged on the database's clock,
        # read through ``now_ms`` (``palyra.core.clock``); else ``now_ms`` is the clock.
        self._now: Callable[[], int] = store_clock(store, now_ms)
        self._live = LiveTasks()  # every unfinished task, indexed
        # task id -> the commit of its change in flight (never handed to a caller, so
        # no caller's cancellation can cancel it).
        self._inflight: dict[str, _Commit] = {}
        # idempotency key -> the answer of its first enqueue while that commits.
        self._idem_inflight: dict[str, asyncio.Future[TaskRecord]] = {}
        self._claimers = ClaimLine()  # idle claims, first come first served
        self._timer: asyncio.Task[None] | None = None
        self._timer_wake = asyncio.Event()
        self._timer_due: int | None = None  # the deadline the timer sleeps until
        self._ids = UlidSequence()  # task ids sort in enqueue order (ties on time)
        # Other daemons write the same tasks: each change is a compare-and-set on its row.
        self._shared = store.shared
        # Tasks another daemon changed while a change of ours was in flight: read
        # again once ours settles (whichever landed last, the table has it).
        self._recheck: set[str] = set()
        # One daemon (LMDB): parent run id -> its new tasks whose commit is in flight,
        # and the runs whose end is being committed (an enqueue under one is refused).
        self._arriving: dict[str, set[str]] = {}
        self._ending: set[str] = set()
        # Tasks whose row another version of the daemon wrote (fields this one does not
        # know, or lacks some): task id -> the unknown fields, the record read and the
        # row's exact bytes.
        # Every change writes the fields back untouched, and a compare-and-set on the
        # row as read expects its bytes (this version would encode it otherwise).
        self._carried: dict[str, tuple[dict[str, msgspec.Raw], TaskRecord, bytes]] = {}
        self._closed = False
        # The event loop the queue runs on, once started: every future of a change is
        # made on it without asking asyncio which loop runs (a lookup, and on this
        # Python a getpid() system call, several times per task).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._background: set[asyncio.Future[Any]] = set()  # cancel_children_soon's jobs
        # One daemon's journal: the appends of the changes decided in one pass of the
        # event loop, queued to the writer as one append at the end of the pass
        # (``_flush``): each change's drafts with the commit that answers it.
        self._pass: list[tuple[list[EventDraft], _Commit]] = []
        self.commits = 0
        self.stale_refusals = 0  # updates refused for a stale lease epoch (/metrics)

    # -- lifetime ------------------------------------------------------------
    async def start(self) -> list[TaskRecord]:
        """Load unfinished tasks, recover them, start the deadline timer.

        Returns the tasks recovery moved (each in its own commit).
        """
        loop = self._loop = asyncio.get_running_loop()
        if self._shared:  # before the scan: a change made meanwhile is read again
            self._now()  # the database's clock, measured once before anything needs it
            self._store.on_foreign_rows(partial(self._foreign_rows, loop))
            self._store.on_foreign_unknown(partial(self._foreign_unknown, loop))
        self._live = LiveTasks(self._read(raw) for raw in self._scan_rows())
        moved = []
        for rec in sorted(self._live, key=lambda r: r.task_id):
            # Shared: another daemon's lease may be alive; only a lapsed one is released.
            new = model.recover(rec, self._now(), owner_alive=self._shared)
            if new is not rec:
                # One at a time, each awaited: recovery runs again after a crash here.
                expect = self._expectations([(new, "", ())], rec)
                try:
                    drafts = [self._draft(new, "recovered")]
                    await (self._store.append(drafts, expect=expect)
                           if expect else self._store.append(drafts))
                except PalyraError as exc:
                    if exc.code is not ErrorCode.STATE_CONFLICT:
                        raise
                    self._refresh(rec.task_id)  # another daemon moved it first
                    continue
                self.commits += 1
                self._live.put(new)
                moved.append(new)
        self._timer = asyncio.ensure_future(self._deadlines())
        self._after_change()
        return moved

    async def close(self) -> None:
        """Stop the timer (leases stay in the journal; the next start recovers them)."""
        self._closed = True
        for job in list(self._background):  # the start-up sweep finishes what they left
            job.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
            self._timer = None

    def now_ms(self) -> int:
        """The queue's clock: every task instant is on it (the database's, when shared)."""
        return self._now()

    # -- reads ---------------------------------------------------------------
    def get(self, task_id: str) -> TaskRecord | None:
        """The task as last committed: from memory if unfinished, else from the table."""
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

    def unfinished(self) -> list[TaskRecord]:
        """Every unfinished task, oldest first (from memory; no table scan)."""
        return sorted(self._live, key=lambda r: r.task_id)

    def page(self, *, state: str = "", kind: str = "", parent_run_id: str = "",
             after_task_id: str = "", limit: int = 100) -> tuple[list[TaskRecord], str]:
        """Newest first (task ids are ULIDs); ``(page, next_after_task_id)``.

        An unfinished ``state`` is answered from memory; anything else walks the
        table backwards from ``after_task_id`` a few rows at a time and stops as
        soon as the page is full, so a page costs its own rows, not the table.
        """
        def wanted(rec: TaskRecord) -> bool:
            return ((not state or rec.state == state) and (not kind or rec.kind == kind)
                    and (not parent_run_id or rec.parent_run_id == parent_run_id))

        limit = max(1, limit)
        if state and state not in FINAL_STATES:
            live = sorted((r for r in self._live if wanted(r)
                           and (not after_task_id or r.task_id < after_task_id)),
                          key=lambda r: r.task_id, reverse=True)
            page = live[:limit]
            return page, (page[-1].task_id if len(live) > limit else "")
        found: list[TaskRecord] = []
        before = _ID + after_task_id if after_task_id else _ID_END
        while len(found) <= limit:
            rows = self._store.scan_entities_before(TABLE, before, _PAGE_ROWS)
            for key, value in rows:
                if not key.startswith(_ID):
                    return found, ""
                rec = model.decode(value)
                if wanted(rec):
                    found.append(rec)
                    if len(found) > limit:
                        break
            if len(rows) < _PAGE_ROWS:
                break
            before = rows[-1][0]
        page = found[:limit]
        return page, (page[-1].task_id if len(found) > limit else "")

    def _scan_rows(self) -> Iterable[bytes]:
        """The stored row of every unfinished task."""
        after = ""
        while True:
            rows = self._store.scan_entities(TABLE, _ID, after, 1000)
            for _key, value in rows:
                if not model.decode(value).final:
                    yield value
            if len(rows) < 1000:
                return
            after = rows[-1][0]

    def _read(self, row: bytes) -> TaskRecord:
        """The record of a stored task row, noting the fields it carries that this
        version does not know (kept while the task is unfinished)."""
        rec = model.decode(row)
        if not rec.final:
            unknown = model.unknown_fields(row)
            # Also a row this version would encode otherwise (an older daemon's, with
            # fewer fields): a compare-and-set on it must expect its own bytes.
            if unknown or model.encode(rec) != row:
                self._carried[rec.task_id] = (unknown, rec, row)
                return rec
        self._carried.pop(rec.task_id, None)
        return rec

    def _row(self, rec: TaskRecord) -> bytes:
        """The stored form of ``rec``, with the unknown fields its row carried."""
        carried = self._carried.get(rec.task_id)
        if carried is None:
            return model.encode(rec)
        return carried[2] if carried[1] is rec else model.encode_carrying(rec, carried[0])

    def _draft(self, rec: TaskRecord, event: str, extra: tuple[EntityWrite, ...] = (), *,
               row: bool = True) -> EventDraft:
        return _draft(rec, event, extra, row=self._row(rec) if row else None)

    # -- writes --------------------------------------------------------------
    async def enqueue(self, kind: str, *, payload: dict[str, Any] | None = None,
                      priority: int = 0, delay_ms: int = 0, ttl_ms: int = 0,
                      max_attempts: int = model.DEFAULT_MAX_ATTEMPTS, parent_run_id: str = "",
                      idempotency_key: str = "", debounce: model.Debounce | None = None,
                      also: Callable[[TaskRecord], Sequence[EventDraft]] | None = None,
                      claim_for: str = "", lease_ms: int = model.DEFAULT_LEASE_MS,
                      ) -> tuple[TaskRecord, bool]:
        """Queue a task; ``(task, created)``. A known ``idempotency_key`` returns its task.

        With ``debounce``, ``payload`` is one item: it joins the queued task of the
        same key (``created`` False) while that one waits and has room, so a burst
        becomes one task whose payload is ``{"items": [...]}``, run ``quiet_ms`` after
        the last item and never later than ``max_wait_ms`` after the first.

        ``also`` gives journal drafts that must land *in the same commit* as the
        task's row (e.g. a channel message and its dedupe key), from the task as it
        will be stored; nothing is written when the key was already known.

        ``claim_for`` (a worker that runs it at once, not with ``debounce`` or
        ``delay_ms``): the task is born claimed by that owner under ``lease_ms``, both
        moves in the enqueue's one commit (no claim commit, no wake-up of claimers),
        and the answer is the claimed task for the caller to hand to that worker.

        ``parent_run_id``: the run the task belongs to (its end cancels the task). The
        enqueue is refused once that run has ended; on a shared journal it is a
        compare-and-set on the run's row, so a run ending on another daemon in the same
        instant refuses it too (``palyra.tasks.parent``).

        Raises:
            InvalidArgument: an empty or long kind, a payload over 64 KiB, a long key.
            PalyraError: ``RUN_TERMINAL`` when ``parent_run_id`` has ended;
                ``UNAVAILABLE`` (retryable, nothing written) when its rows changed under
                more than ``ENQUEUE_CONFLICTS`` decisions in a row.
        """
        payload_json = _checked(kind, idempotency_key, payload)
        fresh = False  # read the parent's row from the store, not the cache (after a miss)
        conflicts = 0
        while True:
            if conflicts > ENQUEUE_CONFLICTS:
                raise _contended(kind, conflicts)
            if idempotency_key:
                first = self._idem_inflight.get(idempotency_key)
                if first is not None:  # the same key is being enqueued: its answer is ours
                    with contextlib.suppress(PalyraError):
                        return await asyncio.shield(first), False
                    continue  # that enqueue failed: try again
                known = self._store.get_entity(TABLE, _IDEM + idempotency_key)
                if known is not None:
                    return self.require(known.decode()), False
            now = self._now()
            if debounce is not None:
                joining = self._live.debouncing(debounce.key)
                busy = [self._inflight[r.task_id] for r in joining if r.task_id in self._inflight]
                if busy:
                    await _settled(busy)  # join the batch as committed, then decide
                    continue
                joined = await self._coalesce(joining, kind, payload or {}, now, debounce, also)
                if joined is _AGAIN:
                    conflicts += 1
                    continue  # another daemon changed that task: read again, decide again
                if isinstance(joined, TaskRecord):
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
            # Checked last, with nothing awaited before the commit is queued.
            if parent_run_id in self._ending:
                raise parent_ended(parent_run_id)
            parent = (parent_alive(self._store, parent_run_id, fresh=fresh and self._shared),
                      ) if parent_run_id else ()
            extra = (EntityWrite(TABLE, _IDEM + idempotency_key, rec.task_id.encode()),
                     ) if idempotency_key else ()
            changes: list[Change] = [(rec, "enqueued", extra)]
            taker = (self._born_claimed(changes, claim_for, lease_ms, now)
                     if debounce is None and delay_ms <= 0 else None)
            answer = self._enqueue_new(changes, also, idempotency_key, taker, parent)
            try:  # awaited here, not in a coroutine of its own: one frame fewer per task
                return await answer, True
            except PalyraError as exc:
                if exc.code is not ErrorCode.STATE_CONFLICT:
                    raise
            # Another daemon took the key first (the caller finds its task) or changed
            # the parent run's row: decided again.
            fresh = True
            conflicts += 1

    def _born_claimed(self, changes: list[Change], claim_for: str, lease_ms: int, now: int
                      ) -> _Claimer | None:
        """Append the new task's claim to ``changes`` if it is born claimed: by
        ``claim_for``, or by the claimer in line it is handed to (returned)."""
        rec = changes[0][0]
        if claim_for:
            # Born claimed: one event for both moves (_drafts); the answer is the last.
            changes.append((model.claim(rec, claim_for, now, lease_ms), "claimed", ()))
            return None
        taker = self._waiting_for(rec.kind, now) if self._claimers else None
        if taker is not None:
            # A worker waits for this kind and nothing else is ready for it: the task is
            # born claimed by it in this one commit (no claim commit of its own, so
            # enqueue -> start costs one durable commit, not two).
            changes.append((model.claim(rec, taker.owner, now, taker.lease_ms), "claimed", ()))
        return taker

    async def _coalesce(self, joining: list[TaskRecord], kind: str, item: Any, now: int,
                        debounce: model.Debounce,
                        also: Callable[[TaskRecord], Sequence[EventDraft]] | None
                        ) -> TaskRecord | object | None:
        """The queued task ``item`` joined (None: none has room; ``_AGAIN``: that task
        changed on another daemon meanwhile)."""
        for live in joining:
            joined = model.coalesce(live, item, now, debounce)
            if joined is not None and joined.kind == kind:
                try:
                    return await self._commit([(joined, "coalesced", ())], also, base=live)
                except PalyraError as exc:
                    if exc.code is not ErrorCode.STATE_CONFLICT:
                        raise
                    return _AGAIN
        return None

    def _enqueue_new(self, changes: list[Change],
                     also: Callable[[TaskRecord], Sequence[EventDraft]] | None,
                     idempotency_key: str, taker: _Claimer | None,
                     parent: tuple[RowExpectation, ...] = ()) -> asyncio.Future[TaskRecord]:
        """Queue a new task's commit; its answer, which fails ``STATE_CONFLICT`` when
        another daemon took its idempotency key first, or changed the parent run's row
        (``parent``: what the commit expects of it).

        With ``taker``, ``changes`` end with its claim: the enqueuer is answered with
        the queued task (its own change) and the taker with the claimed one, both once
        the one commit is durable.
        """
        try:
            answer = self._submit(changes, also, base=None,
                                  taker=taker.claimed if taker is not None else None,
                                  expect=parent)
        except BaseException:  # refused before anything was queued: back to its place
            if taker is not None:
                self._claimers.put_back(taker)
            raise
        if idempotency_key:
            self._idem_inflight[idempotency_key] = answer
            answer.add_done_callback(partial(self._idem_settled, idempotency_key))
        new = changes[0][0]
        if new.parent_run_id and not self._shared:  # its run's end waits for it to land
            self._arriving.setdefault(new.parent_run_id, set()).add(new.task_id)
            answer.add_done_callback(partial(self._arrived, new.parent_run_id, new.task_id))
        return answer

    def _arrived(self, run_id: str, task_id: str, _answer: asyncio.Future[TaskRecord]) -> None:
        arriving = self._arriving.get(run_id)
        if arriving is not None:
            arriving.discard(task_id)
            if not arriving:
                del self._arriving[run_id]

    def _idem_settled(self, key: str, answer: asyncio.Future[TaskRecord]) -> None:
        if self._idem_inflight.get(key) is answer:
            del self._idem_inflight[key]

    async def claim(self, owner: str, kinds: frozenset[str] | None = None,
                    lease_ms: int = model.DEFAULT_LEASE_MS, *,
                    begun: asyncio.Future[TaskRecord] | None = None) -> TaskRecord:
        """Wait for the best ready task of ``kinds`` and take it under a new lease.

        Best: highest priority, then the earliest due, then the oldest. ``begun``: the
        claim :meth:`claim_begin` started for the same arguments (awaited here, and
        started again if its commit failed).
        """
        while True:
            claimed = begun if begun is not None else self.claim_begin(owner, kinds, lease_ms)
            begun = None
            try:
                return await claimed
            except asyncio.CancelledError:
                self._claimers.remove(claimed)
                raise
            except LostClaim:
                continue

    def claim_begin(self, owner: str, kinds: frozenset[str] | None = None,
                    lease_ms: int = model.DEFAULT_LEASE_MS) -> asyncio.Future[TaskRecord]:
        """Start a claim now, synchronously; finish it with ``claim(..., begun=)``.

        The best ready task's claim is queued to the writer at once (so a worker that
        begins its next claim just before it queues its last task's success has both
        in one group commit); with nothing ready the claimer waits in line, and a
        change that makes a task ready (or an enqueue, born claimed) resolves it once
        that claim is durable: one wake-up.
        """
        claimed: asyncio.Future[TaskRecord] = self._future()
        self._begin(owner, kinds, lease_ms, claimed)
        return claimed

    def claim_future(self) -> asyncio.Future[TaskRecord]:
        """A claim's answer, to be begun later by a :class:`Ride`."""
        return self._future()

    def claim_answering(self, owner: str, kinds: frozenset[str] | None, lease_ms: int,
                        answer: ClaimAnswer) -> None:
        """:meth:`claim_begin`, answered through ``answer`` (no future: a worker's slot
        starts the claimed task's run as the claim is answered)."""
        self._begin(owner, kinds, lease_ms, answer)

    def _begin(self, owner: str, kinds: frozenset[str] | None, lease_ms: int,
               claimed: ClaimAnswer) -> None:
        if not self._claim_now(owner, kinds, lease_ms, claimed):
            self._claimers.append(_Claimer(owner, kinds, lease_ms, claimed))

    def _ride_alone(self, ride: Ride | None) -> None:
        """Begin ``ride``'s claim on its own, unless it was begun already."""
        if ride is not None and not ride.begun:
            ride.begun = True
            try:
                self._begin(ride.owner, ride.kinds, ride.lease_ms, ride.claimed)
            except Exception as exc:  # the journal refused the claim (closed)
                if not ride.claimed.done():
                    ride.claimed.set_exception(exc)

    def _waiting_for(self, kind: str, now: int) -> _Claimer | None:
        """The first claimer in line that takes ``kind``, out of the line, if nothing
        ready is waiting for it (then it gets that, as :meth:`_hand_out` would give it)."""
        claimer = self._claimers.first(kind)
        if claimer is None:
            return None
        if self._live.best(claimer.kinds, now) is not None:
            # A task came due before the timer handed it out: it goes first.
            self._hand_out()
            return None
        self._claimers.take(claimer)
        return claimer

    def _claim_now(self, owner: str, kinds: frozenset[str] | None, lease_ms: int,
                   answer: ClaimAnswer) -> bool:
        """Claim the best ready task for ``answer`` (False: none is ready)."""
        now = self._now()
        rec = self._live.best(kinds, now)
        if rec is None:
            return False
        self._queue([(model.claim(rec, owner, now, lease_ms), "claimed", ())], None, answer,
                     True, base=rec)
        return True

    async def heartbeat(self, task_id: str, epoch: int,
                        lease_ms: int = model.DEFAULT_LEASE_MS, *,
                        progress: dict[str, Any] | None = None) -> TaskRecord:
        """Renew a lease; the answer's ``state`` says whether a cancel was asked for.

        ``progress`` is recorded on the task (``progress_json``) in the same commit and
        kept across attempts: the next attempt of a task cut off after it resumes there.

        Raises:
            PalyraError: ``LEASE_STALE`` when ``epoch`` is not the task's lease.
        """
        noted = None if progress is None else msgspec.json.encode(progress).decode()
        return await self._update(
            task_id, lambda rec: model.heartbeat(rec, epoch, self._now(), lease_ms, noted),
            lambda _new: "heartbeat")

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
                                 then: Sequence[FollowUp] = (), *, ride: Ride | None = None
                                 ) -> tuple[TaskRecord, list[TaskRecord]]:
        """:meth:`succeed`, and the follow-ups born claimed (``claim_for``), for the caller
        to run under their leases. ``ride``: the worker's next claim, in the same commit
        when a task is ready (else begun on its own; whatever happens, it is begun).

        Raises:
            InvalidArgument: as :meth:`succeed`.
        """
        try:
            payloads: list[str] = []
            if then:  # most successes hand nothing on
                if any(not f.idempotency_key for f in then):
                    raise InvalidArgument("a follow-up task needs an idempotency_key")
                payloads = [_checked(f.kind, f.idempotency_key, f.payload) for f in then]
            result_json = msgspec.json.encode(result).decode() if result else ""
            if self._shared:
                self._ride_alone(ride)
            while True:
                while (pending := self._inflight.get(task_id)) is not None:
                    await _settled([pending])
                try:  # awaited here, not in a coroutine of its own: one frame fewer
                    answer, done, born = self._succeed_now(task_id, epoch, result_json, then,
                                                           payloads, ride)
                    if answer is None:  # finished already: nothing to commit
                        return done, []
                    await answer
                except PalyraError as exc:
                    if exc.code is not ErrorCode.STATE_CONFLICT:
                        raise
                    continue  # another daemon changed the task: decide again on its row
                return done, [new for new in born if new.leased]
        finally:
            if ride is not None and not ride.begun:  # refused or failed before it rode
                self._ride_alone(ride)

    def _succeed_now(self, task_id: str, epoch: int, result_json: str,
                     then: Sequence[FollowUp], payloads: list[str], ride: Ride | None
                     ) -> tuple[asyncio.Future[TaskRecord] | None, TaskRecord,
                                list[TaskRecord]]:
        """Decide a success on the task's committed state (no change of it in flight)
        and queue its commit: ``(answer, finished task, follow-ups)``, answer None when
        the task was finished already (nothing queued)."""
        rec = self._live.get(task_id)  # an unfinished task's, as ``require`` reads it first
        if rec is None:
            rec = self.require(task_id)
        try:
            done = model.succeed(rec, epoch, self._now(), result_json)
        except PalyraError as exc:
            self._count_stale(exc)
            raise
        if done is rec:
            self._ride_alone(ride)
            return None, rec, []
        changes, born, taker = self._success_changes(done, then, payloads, ride)
        answer = self._submit(changes, base=rec, taker=taker)
        self._after_success(answer, born, ride, taker)
        return answer, done, born

    def _success_changes(self, done: TaskRecord, then: Sequence[FollowUp],
                         payloads: list[str], ride: Ride | None
                         ) -> tuple[list[Change], list[TaskRecord],
                                    ClaimAnswer | None]:
        """A success's changes: the task's, its follow-ups' (each once per key) and the
        worker's next claim riding along; the follow-ups' records; the ride's taker."""
        changes: list[Change] = [(done, "succeeded", ())]
        born: list[TaskRecord]
        # (Not ``list[TaskRecord]()``: calling the alias tries to tag the list with it,
        # an AttributeError raised and caught per success.)
        now, born = self._now(), []
        for follow, payload_json in zip(then, payloads, strict=True):
            key = follow.idempotency_key
            if key in self._idem_inflight or any(r.idempotency_key == key for r in born) or (
                    not follow.new_key
                    and self._store.get_entity(TABLE, _IDEM + key) is not None):
                continue
            new = model.new_task(self._ids.next(now), follow.kind, now,
                                 payload_json=payload_json, max_attempts=follow.max_attempts,
                                 idempotency_key=key)
            changes.append((new, "enqueued", (EntityWrite(TABLE, _IDEM + key,
                                                          new.task_id.encode()),)))
            if follow.claim_for:  # born claimed: one event for both moves (_drafts)
                new = model.claim(new, follow.claim_for, now, follow.lease_ms)
                changes.append((new, "claimed", ()))
            born.append(new)
        taker = None
        if ride is not None and not ride.begun and not ride.claimed.done():
            ready = self._live.best(ride.kinds, now)
            if ready is not None:  # last, so the claimer is the commit's taker
                changes.append((model.claim(ready, ride.owner, now, ride.lease_ms),
                                "claimed", ()))
                taker = ride.claimed
            else:  # nothing is ready (just looked): it waits in line, as a claim does
                ride.begun = True
                self._claimers.append(_Claimer(ride.owner, ride.kinds, ride.lease_ms,
                                               ride.claimed))
        return changes, born, taker

    def _after_success(self, answer: asyncio.Future[TaskRecord], born: list[TaskRecord],
                       ride: Ride | None, taker: ClaimAnswer | None) -> None:
        """A success's commit is queued: its ride begun, its follow-ups' keys in flight."""
        if ride is not None and not ride.begun:
            ride.begun = taker is not None
            self._ride_alone(ride)  # not looked for (staged, or answered): begun on its own
        for new in born:  # an enqueue of the same key meanwhile gets this task
            self._idem_inflight[new.idempotency_key] = follow_answer = _follow(answer, new)
            follow_answer.add_done_callback(partial(self._idem_settled, new.idempotency_key))

    def stage_success(self, task_id: str, epoch: int, result: dict[str, Any] | None,
                      then: Sequence[FollowUp], ride: Callable[[], Ride | None]
                      ) -> StagedSuccess | None:
        """A success laid out for an append someone else makes (a channel dispatch's
        success in its run's last commit), or None: it must be committed on its own
        (a shared journal, a change of the task in flight, a lease moved on).

        ``ride`` makes the worker's next claim, asked only once the success is staged.
        The caller calls :meth:`StagedSuccess.land` if that append landed, else
        :meth:`StagedSuccess.abandon`; the task is held meanwhile, as in any commit.

        Raises:
            InvalidArgument: as :meth:`succeed`.
        """
        if self._shared or task_id in self._inflight:
            return None
        if any(not f.idempotency_key for f in then):
            raise InvalidArgument("a follow-up task needs an idempotency_key")
        payloads = [_checked(f.kind, f.idempotency_key, f.payload) for f in then]
        rec = self.get(task_id)
        if rec is None:
            return None
        try:
            done = model.succeed(rec, epoch, self._now(),
                                 msgspec.json.encode(result).decode() if result else "")
        except PalyraError:
            return None  # refused on its own path too, where it is counted and raised
        if done is rec:
            return None
        riding = ride()
        changes, born, taker = self._success_changes(done, then, payloads, riding)
        answer = self._future()
        commit = _Commit(partial(self._settle, changes, answer, False, taker))
        self._hold(changes, commit)
        self._after_success(answer, born, riding, taker)
        return StagedSuccess(self._drafts(changes), commit, answer, done, born,
                             partial(self._idem_abandoned, born))

    def _idem_abandoned(self, born: list[TaskRecord]) -> None:
        """A staged success's append failed: its follow-ups' keys are free at once (its
        worker queues them in the success it commits next, maybe before a loop turn)."""
        for new in born:
            follow = self._idem_inflight.pop(new.idempotency_key, None)
            if follow is not None:  # its failure is nobody's to hear unless they wait
                follow.add_done_callback(_heard)

    async def fail(self, task_id: str, epoch: int, error: str) -> TaskRecord:
        """Report a failure: retried with backoff, or failed after the last attempt."""
        return await self._update(
            task_id, lambda rec: model.fail(rec, epoch, self._now(), error[:2000]),
            lambda new: str(new.state))

    async def _update(self, task_id: str, change: Callable[[TaskRecord], TaskRecord],
                      event: Callable[[TaskRecord], str]) -> TaskRecord:
        """Apply ``change`` to the task's committed state and commit it (unless unchanged);
        decided again on the task's row if another daemon changed it meanwhile."""
        while True:
            while (pending := self._inflight.get(task_id)) is not None:
                await _settled([pending])
            rec = self.require(task_id)
            try:
                new = change(rec)
            except PalyraError as exc:
                self._count_stale(exc)
                raise
            if new is rec:
                return rec
            try:
                return await self._commit([(new, event(new), ())], base=rec)
            except PalyraError as exc:
                if exc.code is not ErrorCode.STATE_CONFLICT:
                    raise

    def _count_stale(self, refused: PalyraError) -> None:
        """Count a worker write refused for a stale lease epoch (``/metrics``)."""
        if refused.code is ErrorCode.LEASE_STALE:
            self.stale_refusals += 1

    def _future(self) -> asyncio.Future[Any]:
        """A future on the queue's loop (before ``start``: on the running one)."""
        loop = self._loop
        return (loop if loop is not None else asyncio.get_running_loop()).create_future()

    def depth(self) -> dict[tuple[str, str], int]:
        """Unfinished tasks by (kind, state), for ``/metrics``."""
        return dict(collections.Counter((rec.kind, str(rec.state)) for rec in self._live))

    async def cancel(self, task_id: str, reason: str) -> TaskRecord:
        """Cancel now (nobody runs it) or at the worker's next heartbeat."""
        return await self._update(
            task_id, lambda rec: model.request_cancel(rec, self._now(),
                                                      reason[:500] or "cancelled"),
            lambda new: str(new.state))

    async def lapse(self, task_id: str, reason: str) -> TaskRecord:
        """End a lease whose worker stopped heartbeating (the watchdog in ``auto`` mode):
        re-queued with backoff, or failed after its last attempt. The old epoch can
        write nothing more."""
        return await self._update(
            task_id, lambda rec: (model.release(rec, self._now(), reason, Outcome.LOST)
                                  if rec.leased else rec),
            lambda _new: "lease_lapsed")

    async def cancel_children(self, run_id: str, reason: str) -> list[TaskRecord]:
        """Cancel every unfinished task whose parent is ``run_id``."""
        children = [r.task_id for r in self._live.children(run_id)]
        return [await self.cancel(task_id, reason) for task_id in children]

    def runs_with_children(self) -> list[str]:
        """Every run some unfinished task (as memory has it) has as its parent."""
        return self._live.parents()

    def has_children(self, run_id: str) -> bool:
        """Whether some unfinished task (as memory has it) has ``run_id`` as its parent."""
        return bool(self._live.children(run_id))

    def cancel_children_soon(self, run_id: str, reason: str) -> None:
        """Cancel ``run_id``'s unfinished tasks in the background, each its own
        compare-and-set (:meth:`cancel`); a failure is logged, the start-up sweep and
        the other daemons' run-end followers try again."""
        if self._closed:
            return
        job = asyncio.ensure_future(self.cancel_children(run_id, reason))
        self._background.add(job)
        job.add_done_callback(self._background_done)

    def _background_done(self, job: asyncio.Future[Any]) -> None:
        self._background.discard(job)
        if not job.cancelled() and (error := job.exception()) is not None:
            log.warning("cancelling a run's tasks failed: %s", error)

    @contextlib.asynccontextmanager
    async def cancelling_children(self, run_id: str, reason: str
                                  ) -> AsyncIterator[list[EventDraft]]:
        """The journal drafts that cancel ``run_id``'s unfinished tasks, for the caller to
        commit *in the same append as the run's own end* (the cause).

        The children are held until the caller's block ends, so nothing moves these
        tasks in between; memory follows only if the block ends without an error
        (the commit landed).

        On a shared journal the run's end commits alone (no drafts) and the children
        are cancelled after it lands, each by its own compare-and-set. Their cancels
        cannot ride in the run's commit: another daemon may change a child in the same
        instant (claim it, finish it), and a refused expectation there would refuse the
        run's end with it, or a blind write would overwrite that change. A crash
        between the two commits leaves no child of the ended run running forever:
        every other daemon's watcher sees the run's end and cancels its children after
        a grace delay (``palyra.daemon.run_ends``), and each daemon's start-up sweeps
        the children of ended runs.
        """
        if self._shared:
            yield []
            self.cancel_children_soon(run_id, reason)  # the run's end landed
            return
        # New tasks of the run in flight land first and are cancelled with the rest;
        # from here until the run's end lands, an enqueue under it is refused.
        while busy := [self._inflight[t] for t in {*(r.task_id for r in self._live.children(
                run_id)), *self._arriving.get(run_id, ())} if t in self._inflight]:
            await _settled(busy)
        self._ending.add(run_id)
        try:
            async with self._cancelling(run_id, reason) as drafts:
                yield drafts
        finally:
            self._ending.discard(run_id)

    @contextlib.asynccontextmanager
    async def _cancelling(self, run_id: str, reason: str) -> AsyncIterator[list[EventDraft]]:
        """One daemon: ``cancelling_children``'s drafts, its children held meanwhile."""
        now = self._now()
        moved = []
        for rec in self._live.children(run_id):
            new = model.request_cancel(rec, now, reason[:500])
            if new is not rec:
                moved.append(new)
        if not moved:
            yield []
            return
        block = _Commit(None)
        for new in moved:
            self._live.hold(new.task_id)
            self._inflight[new.task_id] = block
        landed = False
        try:
            yield [self._draft(new, str(new.state)) for new in moved]
            landed = True
        finally:
            for new in moved:
                del self._inflight[new.task_id]
                if landed:
                    self._live.put(new)
                else:
                    self._live.release(new.task_id)
            block.set_result([])
            self._after_change()

    # -- commits -------------------------------------------------------------
    async def _commit(self, changes: list[Change],
                      also: Callable[[TaskRecord], Sequence[EventDraft]] | None = None, *,
                      base: TaskRecord | None) -> TaskRecord:
        return await self._submit(changes, also, base=base)

    def _submit(self, changes: list[Change],
                also: Callable[[TaskRecord], Sequence[EventDraft]] | None = None, *,
                base: TaskRecord | None, taker: ClaimAnswer | None = None,
                expect: tuple[RowExpectation, ...] = ()) -> asyncio.Future[TaskRecord]:
        """:meth:`_queue` ``changes``, answered through a new future."""
        answer: asyncio.Future[TaskRecord] = self._future()
        self._queue(changes, also, answer, False, base=base, taker=taker, expect=expect)
        return answer

    def _queue(self, changes: list[Change],
               also: Callable[[TaskRecord], Sequence[EventDraft]] | None,
               answer: ClaimAnswer, lost_ok: bool, *,
               base: TaskRecord | None, taker: ClaimAnswer | None = None,
               expect: tuple[RowExpectation, ...] = ()) -> None:
        """Queue ``changes`` as one journal append and hold their tasks until it settles.

        Synchronous up to the writer's queue, so changes decided in this order are
        committed in this order. The answer (the first change's record, or the last
        one's when every change is of the first's task) resolves
        once memory follows the durable commit; a failed commit releases the tasks
        unchanged and fails the answer; a claimer's (``lost_ok``) with ``LostClaim`` instead
        (it then looks again). ``taker``: a waiting claimer's
        answer when the last change claims a task for it (the first's, or one a success
        takes for its worker's next claim); it gets that claimed record (or ``LostClaim``),
        and ``answer`` the first change's record.

        ``base``: the record the first change was decided on (None: a new task). On a
        shared journal the commit expects the task's row to hold it still, and every row
        of ``expect`` to hold its value.
        """
        first = changes[0][0]
        drafts = [*also(first)] if also is not None else []
        drafts += self._drafts(changes)
        commit = _Commit(partial(self._settle, changes, answer, lost_ok, taker))
        # Raises before anything is queued. The journal answers ``commit`` itself on
        # the loop, later (never inside this call: ``drafts`` is not empty).
        if self._shared:
            self._store.submit(drafts, answer=commit, loop=self._loop,
                               expect=self._expectations(changes, base) + expect)
        elif also is not None or self._loop is None or self._store.closed:
            # A caller's own drafts (refused, they fail its call alone), before
            # ``start`` or on a closed journal (refused here, as a claimer expects): now.
            self._flush()
            self._store.submit(drafts, answer=commit, loop=self._loop)
        else:
            self._join_pass(drafts, commit)
        del drafts
        self._hold(changes, commit)

    def _join_pass(self, drafts: list[EventDraft], commit: _Commit) -> None:
        """Queue ``drafts`` with this loop pass's other changes: one append for them all.

        A burst's changes (its successes, claims and enqueues, decided as their callers
        run in one pass) each cost the journal an append of their own before: a request,
        its preparation call, a row plan and an answer, on the loop and on the writer.
        Changes of one task never share an append (a later one waits for the earlier
        commit), and the order of changes is kept. One daemon only: on a shared journal
        each change is its own compare-and-set, and only there does a singleton fence its
        appends (``daemon/singletons.py``), by the task that submits them.
        """
        if not self._pass:
            assert self._loop is not None
            self._loop.call_soon(self._flush)
        self._pass.append((drafts, commit))

    def _flush(self) -> None:
        """Queue this pass's changes to the writer, as one append (see ``_join_pass``)."""
        queued, self._pass = self._pass, []
        if not queued:
            return
        if len(queued) == 1:
            self._submit_alone(*queued[0])
            return
        try:
            self._store.submit([d for drafts, _commit in queued for d in drafts],
                               answer=_Commits([commit for _drafts, commit in queued]),
                               loop=self._loop)
        except Exception:  # refused before anything was queued: each on its own, so a
            for drafts, commit in queued:  # change the journal refuses fails alone
                self._submit_alone(drafts, commit)

    def _submit_alone(self, drafts: list[EventDraft], commit: _Commit) -> None:
        try:
            self._store.submit(drafts, answer=commit, loop=self._loop)
        except Exception as exc:  # the change was refused (its answer hears why)
            commit.refuse(exc)

    def _drafts(self, changes: list[Change]) -> list[EventDraft]:
        """``changes`` as journal events, each task's row written once."""
        n = len(changes)
        if n == 1:
            rec, event, extra = changes[0]
            return [_draft(rec, event, extra, row=self._row(rec))]
        # A task changed twice in one commit stores its row once, as the later change
        # leaves it. A task born claimed (its enqueue, then its claim) is one
        # ``task.enqueued`` event whose state is already ``running`` (the claim's owner,
        # epoch and attempt): both moves are in that one commit, so a reader loses
        # nothing and the message path writes one event fewer per task. Any other
        # change is its own event. (A loop, not a generator: this runs per message.)
        if n == 2:  # the usual pair: a task born claimed, one event (no index of rows)
            (rec, event, extra), (claim, then, more) = changes
            if event == "enqueued" and then == "claimed" and claim.task_id == rec.task_id:
                return [_draft(claim, event, extra + more, row=self._row(claim))]
        last = {rec.task_id: rec for rec, _event, _extra in changes}
        drafts: list[EventDraft] = []
        i = 0
        while i < n:
            rec, event, extra = changes[i]
            if event == "enqueued" and i + 1 < n:
                claim, then, more = changes[i + 1]
                if then == "claimed" and claim.task_id == rec.task_id:
                    rec, extra, i = claim, extra + more, i + 1
            drafts.append(_draft(rec, event, extra, row=self._row(rec)
                                 if last[rec.task_id] is rec else None))
            i += 1
        return drafts

    def _hold(self, changes: list[Change], commit: _Commit) -> None:
        """Hold ``changes``' tasks until ``commit`` settles."""
        for rec, _event, _extra in changes:
            self._live.hold(rec.task_id)
            self._inflight[rec.task_id] = commit

    def _settle(self, changes: list[Change], answer: ClaimAnswer,
                lost_ok: bool, taker: ClaimAnswer | None,
                commit: _Commit, error: BaseException | None) -> None:
        stale = error is not None and getattr(error, "code", None) is ErrorCode.STATE_CONFLICT
        recheck = self._recheck
        # Only a released task or a queued one can be ready for a claimer in line.
        readied = error is not None
        last = changes[-1][0]
        for rec, _event, _extra in changes:
            if self._inflight.get(rec.task_id) is commit:
                del self._inflight[rec.task_id]
            if error is None:
                if rec is last or rec.task_id != last.task_id:  # else a later change of it
                    self._live.put(rec)
                    if rec.final:
                        self._carried.pop(rec.task_id, None)
                    readied = readied or rec.state == State.QUEUED
            else:
                self._live.release(rec.task_id)
            if stale or (recheck and rec.task_id in recheck):
                recheck.discard(rec.task_id)
                self._refresh(rec.task_id)  # as the table has it now
                readied = True  # another daemon's change: it may have made it ready
        if error is None:
            self.commits += 1
        if taker is not None and not taker.done():  # before the enqueuer: it started first
            if error is None:
                taker.set_result(changes[-1][0])
            else:
                taker.set_exception(LostClaim())
        if not answer.done():  # a caller that went away leaves its answer cancelled
            if error is None:
                first = changes[0][0]
                last = changes[-1][0]
                answer.set_result(last if last.task_id == first.task_id and taker is None
                                  else first)
            elif lost_ok and not commit.refused:  # refused: looking again cannot help
                log.warning("a claim's commit failed: %s", error)
                answer.set_exception(LostClaim())
            else:
                answer.set_exception(error)
        self._after_change(readied)

    def _expectations(self, changes: list[Change], base: TaskRecord | None
                      ) -> tuple[RowExpectation, ...]:
        """What ``changes``' commit expects of the stored rows (nothing unless shared): the
        first task's row holds ``base`` (absent when None); any other task, and every
        idempotency key written, is new (absent)."""
        if not self._shared:
            return ()
        first = changes[0][0].task_id
        out = [RowExpectation(TABLE, _ID + first,
                              self._row(base) if base is not None else None)]
        seen = {first}
        for rec, _event, extra in changes:
            if rec.task_id not in seen:
                seen.add(rec.task_id)
                out.append(RowExpectation(TABLE, _ID + rec.task_id, None))
            out += [RowExpectation(TABLE, w.key, None) for w in extra
                    if w.key.startswith(_IDEM)]
        return tuple(out)

    def _refresh(self, task_id: str) -> None:
        """Memory of ``task_id`` as the table holds it now (another daemon changed it)."""
        raw = self._store.get_entity(TABLE, _ID + task_id, fresh=True)
        if raw is not None:
            self._live.put(self._read(raw))

    def _foreign_rows(self, loop: asyncio.AbstractEventLoop,
                      rows: list[tuple[str, str]]) -> None:
        """On the watcher's thread: other daemons' commits wrote ``rows``."""
        ids = [key[len(_ID):] for table, key in rows if table == TABLE and key.startswith(_ID)]
        if ids and not self._closed and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._follow, ids)

    def _foreign_unknown(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the watcher's thread: other daemons' commits whose rows nobody can tell."""
        if not self._closed and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._follow_all)

    def _follow_all(self) -> None:
        """Memory follows every task: the ones it holds and every unfinished one stored
        (a task another daemon enqueued meanwhile, or moved, is not missed)."""
        if self._closed:
            return
        held = [rec.task_id for rec in self._live]
        stored = [model.decode(raw).task_id for raw in self._scan_rows()]
        self._follow(list(dict.fromkeys(held + stored)))

    def _follow(self, task_ids: list[str]) -> None:
        """Memory follows other daemons' changes of ``task_ids`` (a change of ours in
        flight reads the row again once it settles)."""
        if self._closed:
            return
        for task_id in task_ids:
            if task_id in self._inflight:
                self._recheck.add(task_id)
            else:
                self._refresh(task_id)
        self._after_change()

    def _after_change(self, readied: bool = True) -> None:
        """Hand ready tasks to waiting claimers (unless the change made none ready: not
        ``readied``); wake the timer for a nearer deadline."""
        if readied and self._claimers:
            self._hand_out()
        # Only a deadline pushed since the timer looked can be nearer than the one it
        # sleeps until (a task's change in flight takes its deadlines off the heap, and
        # ``put`` pushes them back): compared here, not looked up in the heap per change.
        due = self._live.nearest_pushed()
        if due is not None and (self._timer_due is None or due < self._timer_due):
            self._timer_wake.set()

    def _hand_out(self) -> None:
        empty: set[frozenset[str] | None] = set()  # kinds with nothing ready this pass
        line = self._claimers
        while (claimer := line.first(skip=empty)) is not None:
            line.take(claimer)
            try:
                handed = self._claim_now(claimer.owner, claimer.kinds, claimer.lease_ms,
                                         claimer.claimed)
            except Exception as exc:  # the journal refused the claim (closed): tell the claimer
                claimer.claimed.set_exception(exc)
                continue
            if not handed:
                empty.add(claimer.kinds)
                line.put_back(claimer)

    # -- deadlines -----------------------------------------------------------
    async def _deadlines(self) -> None:
        """Sleep until the next deadline (or a nearer one), then apply what is due."""
        while True:
            self._timer_wake.clear()
            self._live.nearest_pushed()  # what it pushed so far, next_deadline sees
            due = self._timer_due = self._live.next_deadline()
            timeout = None if due is None else max(0.0, (due - self._now()) / 1000)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._timer_wake.wait()
                    continue
            self._timer_due = None
            try:
                await self._apply_due()
            except Exception:  # a failed commit is retried at the next deadline
                log.exception("applying task deadlines failed")
                await asyncio.sleep(0.1)

    async def _apply_due(self) -> None:
        now = self._now()
        commits = []
        due = self._live.due(now)
        for i, rec in enumerate(due):
            # In this process a lease ends only by running out (a hung worker).
            new = model.recover(rec, now, owner_alive=True)
            if new is rec:
                continue  # a not_before passed: claimable now
            event = "lease_lapsed" if rec.leased else str(new.state)
            try:
                commits.append(self._submit([(new, event, ())], base=rec))
            except BaseException:
                for left in due[i:]:  # back on the timer: retried at the next wake-up
                    if self._live.get(left.task_id) is left and not self._live.held(
                            left.task_id):
                        self._live.put(left)
                raise
        self._after_change()  # tasks whose not_before passed are claimable now
        # A failed commit released its task, deadlines and all: retried next wake-up.
        for answer in commits:
            try:
                await answer
            except PalyraError as exc:
                if exc.code is not ErrorCode.STATE_CONFLICT:
                    raise  # else another daemon moved it first: memory follows the row


def _follow(answer: asyncio.Future[TaskRecord], rec: TaskRecord) -> asyncio.Future[TaskRecord]:
    """``rec`` once ``answer``'s commit (which writes it) settles, or its failure."""
    follow: asyncio.Future[TaskRecord] = asyncio.get_running_loop().create_future()

    def settle(done: asyncio.Future[TaskRecord]) -> None:
        if follow.done():
            return
        if done.cancelled() or done.exception() is not None:
            follow.set_exception(PalyraError("the commit that queued it failed",
                                             code=ErrorCode.UNAVAILABLE))
        else:
            follow.set_result(rec)

    answer.add_done_callback(settle)
    return follow


_AGAIN = object()


def _contended(kind: str, conflicts: int) -> PalyraError:
    """The retryable refusal of an enqueue whose rows kept changing under it."""
    return PalyraError(
        f"the {kind} task was not enqueued: the rows it depends on changed under "
        f"{conflicts} decisions in a row; retry it", code=ErrorCode.UNAVAILABLE,
        details={"kind": kind, "conflicts": str(conflicts)})
"""A change refused because another daemon changed the task first: decide again."""


class StagedSuccess:
    """A task's success laid out as drafts for another append (:meth:`TaskQueue.stage_success`)."""

    def __init__(self, drafts: list[EventDraft], commit: _Commit,
                 answer: asyncio.Future[TaskRecord], done: TaskRecord,
                 born: list[TaskRecord], abandoned: Callable[[], None]) -> None:
        self.drafts = drafts
        self._commit = commit
        self._abandoned = abandoned
        self.answer = answer
        self.record = done
        #: The follow-ups born claimed, for their worker to run once this lands.
        self.handed_on = [new for new in born if new.leased]

    @property
    def landed(self) -> bool:
        """The append carrying it is durable."""
        return self._commit.settled and self.answer.done() and not self.answer.exception()

    def land(self) -> None:
        """The append carrying the drafts is durable."""
        self._commit.set_result(None)

    def abandon(self) -> None:
        """The append did not happen: the task is as it was (its worker commits it)."""
        self._commit.set_exception(PalyraError(
            "the append carrying a task's success failed", code=ErrorCode.UNAVAILABLE))
        self._abandoned()


class LostClaim(Exception):
    """A claim's commit failed; the task was released and the claimer looks again (a
    :class:`ClaimAnswer`'s ``set_exception`` gets it)."""


class _Commit:
    """The commit of a change in flight, answered by the journal directly.

    The journal calls ``set_result``/``set_exception`` on the loop once the commit is
    durable or failed, and the queue's bookkeeping (``settle``) runs right then: no
    future of its own, and no loop turn for a done-callback, per commit. Whoever must
    wait for it (a later change of the same task) gets a future on demand (``wait``).
    """

    __slots__ = ("_settle", "_waiter", "refused", "settled")

    def __init__(self, settle: Callable[[_Commit, BaseException | None], None] | None) -> None:
        self._settle = settle
        self._waiter: asyncio.Future[None] | None = None
        self.settled = False
        self.refused = False  # the journal refused its drafts: nothing was queued

    def done(self) -> bool:
        """True once settled."""
        return self.settled

    def set_result(self, _result: Any, /) -> None:
        """The commit is durable."""
        self._settled(None)

    def set_exception(self, exception: BaseException, /) -> None:
        """The commit failed."""
        self._settled(exception)

    def refuse(self, exception: BaseException) -> None:
        """The journal refused the drafts (as ``submit`` raising): nothing was queued."""
        self.refused = True
        self._settled(exception)

    def _settled(self, error: BaseException | None) -> None:
        if self.settled:
            return
        self.settled = True
        try:
            if self._settle is not None:
                self._settle(self, error)
        except Exception:  # the journal's answer loop must go on to its other callers
            log.exception("settling a task commit failed")
        finally:
            if self._waiter is not None and not self._waiter.done():
                self._waiter.set_result(None)

    def wait(self) -> asyncio.Future[None]:
        """A future done once the commit settled (whatever its outcome)."""
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
            if self.settled:
                self._waiter.set_result(None)
        return self._waiter


class _Commits:
    """The answer of one append carrying several changes' drafts: each change's commit
    is answered in the order the changes were decided."""

    __slots__ = ("_commits", "_done")

    def __init__(self, commits: list[_Commit]) -> None:
        self._commits = commits
        self._done = False

    def done(self) -> bool:
        """True once answered."""
        return self._done

    def set_result(self, _result: Any, /) -> None:
        """The append is durable: so is every change in it."""
        self._done = True
        for commit in self._commits:
            commit.set_result(None)

    def set_exception(self, exception: BaseException, /) -> None:
        """The append failed: so did every change in it."""
        self._done = True
        for commit in self._commits:
            commit.set_exception(exception)


def _heard(future: asyncio.Future[Any]) -> None:
    """Mark ``future``'s outcome heard (asyncio logs a failure nobody retrieved)."""
    if not future.cancelled():
        future.exception()


async def _settled(commits: list[_Commit]) -> None:
    """Wait until every one of ``commits`` settled, whatever its outcome."""
    await asyncio.wait([commit.wait() for commit in commits])


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


def _draft(rec: TaskRecord, event: str, extra: tuple[EntityWrite, ...] = (), *,
           row: bytes | None) -> EventDraft:
    """One task change as a journal event with the task's new row ``row`` (None: a
    later change of the same commit writes it)."""
    if row is not None:
        write = (EntityWrite(TABLE, _ID + rec.task_id, row),)
        extra = write + extra if extra else write
    # Positional, in EventDraft's field order (kind, actor, session_id, run_id, tape,
    # payload, principal, device_id, channel, event_id, ts_ms, entity_writes): keywords
    # cost their binding, and a task makes two of these.
    return EventDraft(
        f"task.{event}", ACTOR, "", "", False,
        {"task_id": rec.task_id, "kind": rec.kind, "state": str(rec.state),
         "epoch": rec.lease_epoch, "owner": rec.lease_owner,
         "attempts": rec.attempts, "error": rec.last_error},
        "", "", "", "", 0, extra)


__all__ = ["ClaimAnswer", "FollowUp", "Outcome", "Ride", "StagedSuccess", "State", "TaskQueue", "TaskRecord"]
