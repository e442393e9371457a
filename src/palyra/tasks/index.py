"""The queue's unfinished tasks in memory, indexed so no question scans them all (pure).

With thousands of tasks queued (a burst of channel deliveries) a claim that scanned
every task, woken by every enqueue in every worker, made the queue quadratic: the
ingress benchmark spent a third of the daemon's CPU choosing tasks. Here:

* queued tasks wait in a heap by ``not_before`` until they are due, then move to a
  heap per kind ordered as the queue picks (highest priority, earliest due, oldest);
* every deadline the timer must wake for (a queued task's ``not_before``, a lease's
  expiry, an ``expires_at``) sits in one heap; the timer looks it up when it starts
  sleeping, and a change only tells it the earliest deadline it pushed
  (``nearest_pushed``): a change never walks the heap;
* children by parent run, queued tasks by debounce key, and leased tasks are sets.

Records are immutable and replaced on every change, so a heap entry is current
exactly when it holds the record the task has now (identity); stale entries are
dropped when they reach the top, and the deadline heap is compacted whenever stale
entries outnumber twice the live tasks (a lease's expiry sits there for the lease's length,
30 s, though most tasks finish within milliseconds: at thousands of tasks a second it
held every record of the last 30 s). A task whose change is being committed is *held*:
no question answers it (it is neither ready nor due) until the commit settles, when
``put`` records the new state or ``release`` puts the old one back. Answers equal a scan of all tasks (property test
in ``tests/tasks/test_task_index.py``).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator

from palyra.tasks import model
from palyra.tasks.model import State, TaskRecord

_Ready = tuple[int, int, str, int, TaskRecord]  # (-priority, not_before, id, seq, record)
_Timed = tuple[int, int, TaskRecord]  # (time, seq, record)

COMPACT_SLACK = 64
"""The deadline heap is rebuilt from its current entries once it holds more than
``4 x live tasks + COMPACT_SLACK`` entries: a task has at most two current deadlines, so
a rebuild leaves at most half that, and the next one is at least as many pushes away as
it costs (amortized O(1) a change, memory O(live)); tests pass a smaller slack, so that
compaction runs often."""


_LEASED = frozenset((State.RUNNING, State.CANCEL_REQUESTED))  # TaskRecord.leased


def pick_key(rec: TaskRecord) -> tuple[int, int, str]:
    """The queue's order among ready tasks: priority, then the earliest due, then the oldest."""
    return (-rec.priority, rec.not_before_ms, rec.task_id)


def deadlines_of(rec: TaskRecord) -> list[int]:
    """The times the queue must act on ``rec`` by itself (the timer's wake-ups)."""
    out = []
    if rec.state == State.QUEUED and rec.not_before_ms:
        out.append(rec.not_before_ms)
    if rec.leased and rec.lease_expires_ms:
        out.append(rec.lease_expires_ms)
    if rec.expires_at_ms and not rec.leased:
        out.append(rec.expires_at_ms)
    return out


class LiveTasks:
    """Unfinished tasks by id, with the indexes the queue asks."""

    def __init__(self, recs: Iterable[TaskRecord] = (), *,
                 compact_slack: int = COMPACT_SLACK) -> None:
        self._recs: dict[str, TaskRecord] = {}
        self._compact_slack = compact_slack
        self._seq = itertools.count()
        self._waiting: list[_Timed] = []  # queued, by not_before (moved to _ready when due)
        self._ready: dict[str, list[_Ready]] = {}  # kind -> due queued tasks
        self._deadlines: list[_Timed] = []
        self._children: dict[str, set[str]] = {}
        self._debounce: dict[str, set[str]] = {}
        self._leased: set[str] = set()
        self._held: set[str] = set()
        # The earliest deadline pushed since ``nearest_pushed`` last looked (None: none):
        # only a push can bring the timer's next wake-up nearer.
        self._pushed: int | None = None
        for rec in recs:
            self.put(rec)

    # -- the mapping -----------------------------------------------------------
    def get(self, task_id: str) -> TaskRecord | None:
        """The task's current record, if unfinished."""
        return self._recs.get(task_id)

    def __len__(self) -> int:
        return len(self._recs)

    def __iter__(self) -> Iterator[TaskRecord]:
        return iter(list(self._recs.values()))

    def parents(self) -> list[str]:
        """The runs some task here has as its parent."""
        return [run_id for run_id, tids in self._children.items() if tids]

    def put(self, rec: TaskRecord) -> None:
        """Record a task's new state (a final one leaves memory)."""
        tid = rec.task_id
        self._held.discard(tid)
        old = self._recs.pop(tid, None)
        if old is not None:
            self._unlink(old)
        if rec.final:
            return
        self._recs[tid] = rec
        if rec.parent_run_id:
            self._children.setdefault(rec.parent_run_id, set()).add(tid)
        # deadlines_of(rec), inline (a list and a call per change, twice per task).
        state = rec.state
        if state == State.QUEUED:
            heapq.heappush(self._waiting, (rec.not_before_ms, next(self._seq), rec))
            if rec.debounce_key:
                self._debounce.setdefault(rec.debounce_key, set()).add(tid)
            if rec.not_before_ms:
                self._push(rec.not_before_ms, rec)
        if state in _LEASED:
            self._leased.add(tid)
            if rec.lease_expires_ms:
                self._push(rec.lease_expires_ms, rec)
        elif rec.expires_at_ms:
            self._push(rec.expires_at_ms, rec)
        if len(self._deadlines) > 4 * len(self._recs) + self._compact_slack:
            self._compact()

    def _push(self, at: int, rec: TaskRecord) -> None:
        heapq.heappush(self._deadlines, (at, next(self._seq), rec))
        if self._pushed is None or at < self._pushed:
            self._pushed = at

    def _compact(self) -> None:
        # A held task's entries go too, as at the top: ``release`` or ``put`` brings
        # them back.
        self._deadlines = [e for e in self._deadlines if self._current(e[2])]
        heapq.heapify(self._deadlines)

    def indexed(self) -> int:
        """Entries in the deadline heap, stale ones included (bounded by a multiple of
        the live tasks: see :data:`COMPACT_SLACK`)."""
        return len(self._deadlines)

    def hold(self, task_id: str) -> None:
        """Take a task out of every answer while a change of it is being committed."""
        self._held.add(task_id)

    def held(self, task_id: str) -> bool:
        """True while a change of the task is being committed."""
        return task_id in self._held

    def release(self, task_id: str) -> None:
        """The held change did not commit: the task answers again as it was."""
        if task_id in self._held:
            self._held.discard(task_id)
            rec = self._recs.get(task_id)
            if rec is not None:
                self.put(rec)  # its heap entries were dropped while it was held

    def _unlink(self, old: TaskRecord) -> None:
        # Heap entries go stale by themselves; only the sets need the old record out.
        tid = old.task_id
        if old.parent_run_id:
            _discard(self._children, old.parent_run_id, tid)
        if old.debounce_key:
            _discard(self._debounce, old.debounce_key, tid)
        self._leased.discard(tid)

    def _current(self, rec: TaskRecord) -> bool:
        return self._recs.get(rec.task_id) is rec and rec.task_id not in self._held

    # -- questions -------------------------------------------------------------
    def best(self, kinds: frozenset[str] | None, now_ms: int) -> TaskRecord | None:
        """The ready task of ``kinds`` (any kind: None) the queue would claim next."""
        while self._waiting and self._waiting[0][0] <= now_ms:
            _at, seq, rec = heapq.heappop(self._waiting)
            if self._current(rec):
                key = pick_key(rec)
                heapq.heappush(self._ready.setdefault(rec.kind, []),
                               (key[0], key[1], key[2], seq, rec))
        best: _Ready | None = None
        for kind in (self._ready if kinds is None else kinds):
            heap = self._ready.get(kind)
            # An expired task never becomes ready again (the timer expires it).
            while heap and (not self._current(heap[0][4])
                            or model.is_expired(heap[0][4], now_ms)):
                heapq.heappop(heap)
            if heap and (best is None or heap[0][:3] < best[:3]):
                best = heap[0]
        return best[4] if best is not None else None

    def next_deadline(self) -> int | None:
        """The earliest time the queue must act by itself, if any."""
        while self._deadlines and not self._current(self._deadlines[0][2]):
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None

    def nearest_pushed(self) -> int | None:
        """The earliest deadline pushed since the last call (None: none was), forgotten.

        A change adds deadlines only through ``put``, so a timer that took
        :meth:`next_deadline` and then this (to start afresh) needs waking only when a
        later call answers something earlier than that deadline: asking this per change
        is a comparison, where ``next_deadline`` pops the stale entries a change leaves.
        """
        pushed, self._pushed = self._pushed, None
        return pushed

    def due(self, now_ms: int) -> list[TaskRecord]:
        """The tasks with a deadline at or before ``now_ms`` (each once, oldest first);
        their deadlines are taken off the timer's heap."""
        out: dict[str, TaskRecord] = {}
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            _at, _seq, rec = heapq.heappop(self._deadlines)
            if self._current(rec):
                out[rec.task_id] = rec
        return sorted(out.values(), key=lambda r: r.task_id)

    def children(self, run_id: str) -> list[TaskRecord]:
        """Unfinished tasks whose parent is ``run_id``, oldest first."""
        return [self._recs[t] for t in sorted(self._children.get(run_id, ()))]

    def debouncing(self, key: str) -> list[TaskRecord]:
        """Queued tasks of a debounce key, oldest first."""
        return [self._recs[t] for t in sorted(self._debounce.get(key, ()))]

    def leased(self) -> list[TaskRecord]:
        """Tasks a worker holds now."""
        return [self._recs[t] for t in sorted(self._leased)]


def _discard(index: dict[str, set[str]], key: str, tid: str) -> None:
    ids = index.get(key)
    if ids is not None:
        ids.discard(tid)
        if not ids:
            del index[key]
