"""The single writer thread: group commit of queued requests, in one shape.

Callers enqueue a request (``write.requests``) and await a future. The writer
blocks for the first request, then takes whatever else is already queued (it
never waits for a batch to fill, so a lone caller pays only its own flush).

The lifecycle of a frame, the same for one append or 256:

1. **built**: the pure planner (``write.plan``) lays the batch's appends out
   as records, one per session, on top of the chain heads the writer resolved
   for it, and returns every write in frame order, the ids claimed and the
   ``StoredEvent`` views to answer with. Nothing has touched LMDB; an id that
   is taken fails its caller alone and the batch is planned again without it.
2. **reserved**: the frame is numbered and placed in the commit log
   (``Durability.reserve``); the planner's memory of the heads moves to it.
3. **logged**: one ``O_DSYNC`` write of the frame, the commit point (with
   ``sync=False`` the same write without the flush).
4. **answered**: callers and followers hear of the commit; from here until
   LMDB holds it, reads of this process wait (``JournalEnv.visible``).
5. **applied**: the frame's writes go into the writer's open LMDB transaction,
   together with other answered frames (one ``putmulti`` per sub-DB).
6. **committed**: the open transaction commits to LMDB without a flush, for
   many frames at once (``write.apply``).

Two frames in flight. When more requests are queued (or the batch holds several),
steps 3 and 4 run on the log thread (``write.inflight``) and the writer goes
back to its queue: it plans and reserves frame N+1 from what arrived while N is
written (the write releases the GIL). Before it hands N+1 over it collects N
(written and answered there), so one frame at a time is written, in the order
of their numbers, and N+1 is answered only after N and N+1 are both durable. A
lone caller (one request, nothing queued) is written here: no hand-over.

* **N+1's plan sees N**: it is planned from the heads, positions, tree and tape
  seqs in this thread's memory, which moved at N's reservation, never from LMDB
  (which holds N only at step 5); an id N claims is taken for N+1 while N is in
  flight (``write.clash``), and a batch refused for such ids alone is answered only
  once N is written (``UNAVAILABLE`` if N's write failed). Memory is dropped (its bound) only with no frame in
  flight, so what ``_heads`` then reads back from LMDB includes N.
* **N is applied after it is collected**: its writes go into LMDB in frame order
  with every answered frame, and LMDB commits only with no frame in flight
  (``_settle``): a commit raises the visibility flag, which would otherwise let a
  read miss a frame already answered on the log thread.
* **N+1's bytes cannot reach the disk without N's**: N+1's write starts after N's
  ``O_DSYNC`` write returned, i.e. after N is durable. Were it otherwise (N torn
  or lost, N+1 whole), recovery would still be right: it replays frames in number
  order and stops at the first torn or missing one, so it would stop before N and
  never reach N+1; neither was answered (an answer waits for both), so nothing
  answered is lost and nothing unanswered becomes visible.
* **A failed write of N fails N+1**: N+1 was planned on N. The writer takes N
  back with everything reserved after it (the frame number, the log offset, a
  sync frame N carried, the chain heads; the remembered heads are dropped and
  read again from LMDB), and fails N's callers and N+1's with ``UNAVAILABLE``.
  Nothing of either was answered or applied, and the next frame is written where
  N would have been, under N's number.
* Checkpoints, prunes, tree signatures, sync points, log restarts, map resizes
  and LMDB commits first collect the frame in flight (drain the pipeline): they
  read or record the chain as LMDB will hold it.

Frames are applied late, after the answer, because the callers' event loop
needs the GIL to wake up and this thread would hold it, and because frames put
together cost one LMDB call per table instead of one per write.

Two requests step out of the plan and only because they read their own
writes: a checkpoint signs the head after every frame before it (its one write
is planned like an append's; so does a transparency-log checkpoint, which also
reads the stored tree to prove it extends the last one signed), and a prune
walks and rewrites the oldest records in a child of the open transaction
(``_commit_prune``); all of this module's child transactions are there.

The transparency log's tree grows in the plan (``write.plan``). A journal
written before the tree existed gets it on the writer's first start: the
records the tree lacks are added, oldest first, in frames of their own before
any request is served (``_complete_tree``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from operator import itemgetter
from typing import Any

import lmdb

from palyra.core.chain import GENESIS
from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal import _env as names
from palyra.journal._env import JournalEnv
from palyra.journal._types import StoredEvent
from palyra.journal.read.follow import Deliveries
from palyra.journal.read.reads import last_scoped_number, load_head, pruned_through, record_hash_at
from palyra.journal.tlog.merkle import Frontier
from palyra.journal.write.answer import fail, resolve
from palyra.journal.write.apply import Applier
from palyra.journal.write.clash import first_clash
from palyra.journal.write.commitlog import Op
from palyra.journal.write.durable import Durability, RecordingTxn, Slot, Unsettled
from palyra.journal.write.inflight import Flight, FramesInFlight, LogThread
from palyra.journal.write.memory import remember
from palyra.journal.write.other_commits import OtherCommits
from palyra.journal.write.plan import CommitPlan, Heads, plan_commit
from palyra.journal.write.requests import Append, Checkpoint, Prune, Request, TreeSign, Waiting
from palyra.journal.write.stats import WriterStats

# Past this many entries a remembered heads or tape seqs memory is dropped (write.memory).
_MEMORY_LIMIT = 4096
_KEY = itemgetter(0)
_NO_IDS: frozenset[bytes] = frozenset()


_STOP = object()
_APPLY = object()  # a reader of this process waits for LMDB to hold what was answered

# Answered frames go into one long LMDB write transaction that commits every
# this many frames, before a sync point, when a reader waits, or once no
# request came for _APPLY_IDLE_S: one LMDB commit and one set of page writes
# for many frames, instead of one per frame. The idle wait is long beside a step's
# gaps on purpose: at 0.5 ms a lone run's writer found its queue idle between many
# of its steps, more of them the more loaded the machine (the loop spends about a
# millisecond between its appends), and LMDB committed 0.16-0.89 times per step with
# the load. At 5 ms it commits 0.015 times per step whatever the load: under load
# (tests running beside it, three pairs) C=1 CPU per step fell 1.38 -> 1.13 ms; on a
# quiet machine the two are within the noise (docs/journal/design.md, step 5).
# Readers of this process do not wait it out (they ask: ``JournalEnv.on_wait``); other
# processes see a commit at most 256 frames, a sync point or this long after.
_APPLY_EVERY_FRAMES = 256
# Answered frames wait for the open transaction until this many of their writes
# are pending (or it commits), so their puts go in one LMDB call per table.
_APPLY_EVERY_OPS = 256
_APPLY_IDLE_S = 0.005
# Records added to the tree per frame when a journal older than the tree gets it.
_COMPLETE_TREE_RECORDS = 4096


class Writer(OtherCommits, FramesInFlight):
    """Owns every LMDB write transaction of one store."""

    def __init__(
        self,
        env: JournalEnv,
        max_batch_events: int,
        on_commit: Callable[[list[tuple[StoredEvent, int]]], Deliveries],
        on_rows: Callable[[Iterable[tuple[str, str]], Mapping[tuple[str, str], bytes | None]],
                          None] = lambda rows, values: None,
        followed: Callable[[], bool] = lambda: True,
        on_applied: Callable[[], None] = lambda: None,
    ):
        assert env.durable is not None, "a writable journal has a commit log"
        self._env = env
        self._durable: Durability = env.durable
        self._max_batch = max(1, max_batch_events)
        self._on_commit = on_commit
        self._on_rows = on_rows
        self._followed = followed
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        # Queue a request; the writer resolves its future after the durable
        # commit (the queue's own put: no call around it on the caller's path).
        self.submit: Callable[[Request], None] = self._queue.put
        with env.read() as txn:
            count, head = load_head(env, txn)
            self.pruned_through = pruned_through(env, txn)
        self._session_heads: dict[str, bytes] = {}
        self._tape_next: dict[str, int] = {}
        # The chain every commit is planned on, and that its plan moves on: one object
        # for the writer's life (the two memories are its, not copies). The tree is
        # read in the writer's thread, before it serves (_complete_tree).
        self.chain = Heads(count + 1, head, self._session_heads, self._tape_next, Frontier())
        # Answered frames and the open LMDB transaction they go into.
        self._pending = Applier(env, env.durable, on_applied)
        env.on_wait = self._wanted
        self.stats = WriterStats()
        # The frame being written on the log thread while this one plans the next.
        self._flying: Flight | None = None
        self._failed_flights = 0  # frames whose write failed (each fails those planned on it)
        self._log_thread = LogThread(self._write_flight, self._land_flight)
        self._ready = threading.Event()
        self._start_error: list[BaseException] = []  # what _complete_tree raised, if anything
        self._thread = threading.Thread(target=self._run, name=names.WRITER_THREAD, daemon=True)
        self._thread.start()
        # The tree is complete before anyone reads it or plans on it (_complete_tree).
        self._ready.wait()
        if self._start_error:
            self._thread.join()
            raise self._start_error[0]

    def stop(self) -> None:
        """Finish every queued request, then end the thread."""
        self._queue.put(_STOP)
        self._thread.join()

    def _wanted(self) -> None:
        # A reader (another thread) waits for LMDB to hold the answered frames.
        self._queue.put(_APPLY)

    def _run(self) -> None:
        try:
            try:
                self._complete_tree(_COMPLETE_TREE_RECORDS)
            except BaseException as exc:
                self._start_error.append(exc)
                return
            finally:
                self._ready.set()
            self._serve()
        finally:
            try:
                self._settle()
            finally:
                self._log_thread.stop()

    def _serve(self) -> None:
        stopping = False
        queue_empty, queue_take = self._queue.empty, self._queue.get_nowait
        while not stopping:
            if self._pending.open is None:
                first = self._queue.get()
            else:
                try:
                    first = self._queue.get(timeout=_APPLY_IDLE_S)
                except queue.Empty:
                    self._settle()  # idle: let LMDB hold what was answered
                    continue
            if first is _STOP:
                return
            if first is _APPLY:
                self._settle()
                continue
            batch: list[Request] = [first]  # type: ignore[list-item]
            size = len(first.events) if isinstance(first, Append) else 1
            # Only this thread takes from the queue: when it is not empty,
            # get_nowait cannot fail. At 256 appenders this loop runs for every
            # append: bound methods, and markers tested last (they are rare).
            empty, take, limit, add = queue_empty, queue_take, self._max_batch, batch.append
            while size < limit and not empty():
                item = take()
                if item is _STOP:
                    stopping = True
                    break
                if item is _APPLY:
                    self._settle()
                    continue
                add(item)  # type: ignore[arg-type]
                size += len(item.events) if isinstance(item, Append) else 1
            self._finish()
            if len(batch) == 1 and isinstance(first, Append):  # a lone append: no sorting
                self._commit_appends(batch, time.perf_counter())  # type: ignore[arg-type]
            else:
                self._commit(batch)

    def _commit(self, batch: list[Request]) -> None:
        """The batch's appends as one frame, then its checkpoints and prunes in order."""
        began = time.perf_counter()
        appends = [r for r in batch if isinstance(r, Append)]
        if len(appends) == len(batch):
            self._commit_appends(appends, began)  # counted when it lands
            return
        if appends:
            self._commit_appends(appends, began, observe=False)
        # The others read the chain as LMDB will hold it: no frame left in flight.
        self._collect()
        # The appends' events (a prune's record is not one): those that were not refused
        # or failed. Not a difference of the counters, which the log thread also moves
        # (a frame in flight before this batch lands meanwhile).
        events = sum(len(r.events) for r in appends if r.error is None)
        for request in batch:
            if isinstance(request, Checkpoint):
                self._commit_checkpoint(request)
            elif isinstance(request, Prune):
                self._commit_prune(request)
            elif isinstance(request, TreeSign):
                self._commit_tree_sign(request)
        self.stats.timings.observe(began, batch, events)

    # --- appends: plan -> frame -> (write, answer) -> apply ---------------

    def _commit_appends(self, batch: list[Append], began: float, observe: bool = True) -> None:
        live, pending, failed = batch, self._pending, self._failed_flights
        try:
            while True:
                plan = plan_commit(live, self._heads(live))
                clash = first_clash(plan, live, pending.ids,
                                    self._flying.ids if self._flying else _NO_IDS,
                                    pending.open or pending.txn(), self._env.dbs[names.EVENT_IDS])
                if clash is None:
                    break
                live = [r for r in live if r is not clash]  # it fails alone: plan again
                if not live:
                    self._refuse(batch, began, observe)
                    return
            # The plan outlives a map resize or an LMDB commit (no head moves, no id is
            # freed), not a failed write of the frame in flight (collected on Unsettled).
            try:
                frame, slot = self._reserve(plan.ops, plan.tables)
            except (lmdb.MapFullError, Unsettled):
                frame, slot = self._retried(self._reserve, plan.ops, plan.tables)
            if self._failed_flights != failed:
                self._durable.unreserve(slot)
                raise PalyraError("an earlier commit failed", code=ErrorCode.UNAVAILABLE)
        except Exception as exc:
            fail(batch, exc)
            if observe:
                self.stats.timings.observe(began, batch)
            return
        chain = self.chain
        before = (chain.next_position, chain.head, chain.tree)
        # The frame before it is written by now (the GIL was free while this one was
        # planned); if its write failed, this frame, planned on it, fails too.
        if self._flying is not None and not self._collect():
            self._fail(Flight(batch, live, plan, frame, slot, before, began, observe),
                       PalyraError("an earlier commit failed", code=ErrorCode.UNAVAILABLE))
            return
        for request, answer in zip(live, plan.answers, strict=True):
            request.result = answer
        # The planner's memory moves now: the next batch is planned on this frame.
        chain.next_position, chain.head, chain.tree = plan.next_position, plan.head, plan.tree
        remember(plan, self._session_heads, self._tape_next, _MEMORY_LIMIT)
        if len(batch) > 1 or not self._queue.empty():
            # More is coming: write this frame on the log thread, plan the next here.
            self._flying = flight = Flight(batch, live, plan, frame, slot, before, began, observe)
            self._log_thread.send(flight)
            return
        # A lone caller: written here, with no hand-over to pay on its path.
        try:
            self._durable.write(slot)
        except Exception as exc:
            flight = Flight(batch, live, plan, frame, slot, before, began, observe)
            self._rollback(flight)
            self._fail(flight, exc)
            return
        if slot.carried:
            self._durable.landed(slot)
        pending.add(frame, map(_KEY, plan.claims))
        self._land(batch, live, plan, began, observe)

    def _reserve(self, ops: list[Op], tables: Any) -> tuple[RecordingTxn, Slot]:
        """The next frame for ``ops``, numbered and placed in the log, not written."""
        pending = self._pending
        frame = RecordingTxn.recorded(pending.open or pending.txn(), ops, self._env.dbs,
                                      names.EVENTS, tables)
        # pending.unsettled(), without a call per frame
        slot = self._durable.reserve(
            frame, settled=self._flying is None and not (pending.frames or pending.answered))
        assert slot is not None, "an append writes"
        return frame, slot

    def _settle(self) -> None:
        """Collect the frame in flight, then commit LMDB (never while one is in flight:
        a commit marks what it holds as visible, and that frame is not in it)."""
        self._collect()
        self._pending.commit()

    def _heads(self, batch: list[Append]) -> Heads:
        """The chain heads ``batch`` appends to: this thread's memory, filled from LMDB
        with what it lacks (committed values, as everything it remembers)."""
        sessions, tape_next = self._session_heads, self._tape_next
        for request in batch:
            for event in request.events:
                if event.session_id not in sessions:
                    sessions[event.session_id] = self._stored_head(event.session_id)
                if event.tape and event.run_id not in tape_next:
                    tape_next[event.run_id] = self._stored_seq(event.run_id)
        return self.chain  # the memories themselves, not copies: the planner only reads them

    def _stored_head(self, session_id: str) -> bytes:
        # The session's last record, found through its index: no chain-head
        # table to write on every commit (one page fewer per flush).
        txn = self._pending.read_txn()
        last = last_scoped_number(txn, self._env.dbs[names.BY_SESSION], session_id)
        return GENESIS if last < 0 else record_hash_at(txn, self._env, last)

    def _stored_seq(self, run_id: str) -> int:
        return last_scoped_number(self._pending.read_txn(), self._env.dbs[names.TAPE], run_id) + 1

    def _log(self, ops: list[Op], tables: Any = None) -> RecordingTxn:
        """Write ``ops`` as the next frame: durable (the commit point) on return."""
        pending = self._pending
        frame = RecordingTxn.recorded(pending.open or pending.txn(), ops, self._env.dbs,
                                      names.EVENTS, tables)
        self._durable.log_frame(frame, settled=not pending.unsettled())
        return frame

    def _answer(self, batch: list[Any], plan: CommitPlan, calls: int = 0,
                began: float | None = None) -> None:
        """Tell callers and followers of a written frame (the writer remembered its heads);
        counted with it: ``calls`` append calls, and its timings if ``began`` is given."""
        # Reads of this process wait from here until LMDB holds the frame. Lowered
        # after the frame, not before: a read while it was being flushed saw the
        # journal before it, which nobody had been told is gone.
        if self._env.visible.is_set():
            self._env.visible.clear()
        if plan.rows:
            # Before anyone hears of the commit: no stale read after, and the rows as
            # written are there to read without waiting for LMDB to hold them.
            self._on_rows(plan.rows, plan.rows)  # the rows, and the values they hold
        # Followers first: once an append returns, its events are on their way
        # to every follower too (tests and callers may rely on that order).
        deliveries = (self._on_commit(list(zip(plan.views, plan.sizes, strict=True)))
                      if plan.views and self._followed() else None)
        stats, timings = self.stats, self.stats.timings  # the log thread counts too (write.stats)
        took = 0.0 if began is None else time.perf_counter() - began
        with timings.lock:  # counted before the answer: a caller reads them after it
            if began is not None:
                timings.observe_held(took, batch, len(plan.views))
            stats.commits += 1
            stats.appended_events += len(plan.views)
            stats.appended_bytes += plan.record_bytes
            stats.records += plan.records
            stats.append_calls += calls
            stats.max_batch_calls = max(stats.max_batch_calls, len(batch) if calls else 0)
        resolve(batch, deliveries)

    # --- the two requests that step out of the plan ----------------------

    def _retried(self, attempt: Callable[..., Any], *args: Any) -> Any:
        """``attempt(*args)``, again after growing the map or letting LMDB commit first."""
        while True:
            try:
                return attempt(*args)
            except lmdb.MapFullError:
                self._settle()
                self._env.grow()
            except Unsettled:
                self._settle()

    def _answer_other(self, request: Waiting, plan: CommitPlan, frame: RecordingTxn) -> None:
        chain = self.chain
        chain.next_position, chain.head, chain.tree = plan.next_position, plan.head, plan.tree
        remember(plan, self._session_heads, self._tape_next, _MEMORY_LIMIT)
        self._pending.add(frame, map(_KEY, plan.claims))
        self._answer([request], plan)
        if frame.child:
            self._pending.apply()  # a child txn: commit it before the next begins

    def _finish(self) -> None:
        """Before the next batch: now and then apply the answered frames, commit LMDB, sync."""
        durable, pending = self._durable, self._pending
        if pending.ops >= _APPLY_EVERY_OPS:
            pending.apply()
        if pending.open is not None and (
            pending.frames + len(pending.answered) >= _APPLY_EVERY_FRAMES or durable.sync_due()
        ):
            self._settle()
        if pending.open is None and self._flying is None:
            try:
                durable.after_commit()  # now and then: flush LMDB, restart the log
            except Exception as exc:  # a failed flush: refuse commits until reopened
                durable.broken = exc
