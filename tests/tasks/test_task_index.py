"""The queue's task index answers exactly what a scan of every unfinished task answers.

A reference keeps the tasks in a plain dict and scans them (the queue's code before the
index); random changes and a clock that only moves forward drive both. Which task is
claimed next, the timer's next deadline, which tasks are due, children, debounce
candidates and leased tasks must agree after every step.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from palyra.tasks import model
from palyra.tasks.index import COMPACT_SLACK, LiveTasks, deadlines_of, pick_key
from palyra.tasks.model import State, TaskRecord

STATES = [State.QUEUED, State.RUNNING, State.CANCEL_REQUESTED, State.SUCCEEDED,
          State.FAILED, State.CANCELLED, State.EXPIRED]
KINDS = ["a", "b", "c"]


class Reference:
    """The scan the index replaces."""

    def __init__(self) -> None:
        self.recs: dict[str, TaskRecord] = {}
        self.consumed: list[tuple[TaskRecord, int]] = []  # deadlines `due` took

    def put(self, rec: TaskRecord) -> None:
        if rec.final:
            self.recs.pop(rec.task_id, None)
        else:
            self.recs[rec.task_id] = rec

    def best(self, kinds: frozenset[str] | None, now: int) -> TaskRecord | None:
        ready = [r for r in self.recs.values()
                 if model.is_ready(r, now) and (kinds is None or r.kind in kinds)]
        return min(ready, key=pick_key) if ready else None

    def _open(self) -> list[tuple[TaskRecord, int]]:
        return [(r, d) for r in self.recs.values() for d in deadlines_of(r)
                if not any(c is r and cd == d for c, cd in self.consumed)]

    def next_deadline(self) -> int | None:
        return min((d for _r, d in self._open()), default=None)

    def due(self, now: int) -> list[TaskRecord]:
        hits = [(r, d) for r, d in self._open() if d <= now]
        self.consumed += hits
        return sorted({r.task_id: r for r, _d in hits}.values(), key=lambda r: r.task_id)


def records(ids: int = 6) -> st.SearchStrategy[TaskRecord]:
    # Weighted so that tasks are often ready: queued, due soon, rarely expired.
    times = st.sampled_from([0, 0, 5, 10, 20, 40])
    expiries = st.sampled_from([0, 0, 0, 30, 60])
    return st.builds(
        lambda i, kind, state, prio, nb, exp, lease, parent, key: TaskRecord(
            task_id=f"t{i}", kind=kind, state=state, priority=prio, not_before_ms=nb,
            expires_at_ms=exp, lease_expires_ms=lease if state in (
                State.RUNNING, State.CANCEL_REQUESTED) else 0,
            parent_run_id=parent, debounce_key=key),
        st.integers(0, ids - 1), st.sampled_from(KINDS),
        st.sampled_from([State.QUEUED] * len(STATES) + STATES),
        st.integers(0, 2), times, expiries, times, st.sampled_from(["", "r1", "r2"]),
        st.sampled_from(["", "k1", "k2"]))


ops = st.lists(st.one_of(
    st.tuples(st.just("put"), records()),
    st.tuples(st.just("tick"), st.integers(0, 8)),
    st.tuples(st.just("best"), st.sampled_from([None, frozenset({"a"}),
                                                frozenset({"b", "c"})])),
    st.tuples(st.just("best"), st.just(None)),
    st.tuples(st.just("due"), st.just(0)),
), max_size=100)


@settings(max_examples=1000, deadline=None)
@given(ops)
def test_the_index_agrees_with_a_scan(steps: list[tuple[str, Any]]) -> None:
    _agrees(LiveTasks(), steps)


@settings(max_examples=500, deadline=None)
@given(ops)
def test_the_index_agrees_with_a_scan_while_compacting_at_every_change(
        steps: list[tuple[str, Any]]) -> None:
    _agrees(LiveTasks(compact_slack=0), steps)


def test_stale_deadlines_do_not_pile_up() -> None:
    # A claimed task's lease expiry sits in the deadline heap for the lease's length
    # (30 s) though it finishes in milliseconds: thousands of finished tasks must not
    # keep their records there.
    index = LiveTasks()
    for i in range(5000):
        queued = model.new_task(f"t{i:05}", "a", i)
        index.put(queued)
        running = model.claim(queued, "w", i, model.DEFAULT_LEASE_MS)
        index.put(running)
        index.put(model.succeed(running, running.lease_epoch, i))
    assert len(index) == 0
    assert index.indexed() <= 2 + COMPACT_SLACK  # as the last claim left it
    assert index.next_deadline() is None


def _agrees(index: LiveTasks, steps: list[tuple[str, Any]]) -> None:
    ref, now = Reference(), 0
    timer = _Timer(index)
    for op, arg in steps:
        if op == "put":
            index.put(arg)
            ref.put(arg)
        elif op == "tick":
            now += arg
        elif op == "best":
            assert index.best(arg, now) is ref.best(arg, now)
        else:
            got, want = index.due(now), ref.due(now)
            assert [r.task_id for r in got] == [r.task_id for r in want]
            assert all(a is b for a, b in zip(got, want, strict=True))  # the current records
            timer.look()  # the queue's timer looks again once it applied what was due
        timer.changed()
        # Never late: the timer sleeps until no later than the next deadline there is.
        assert timer.due is not None or ref.next_deadline() is None
        assert ref.next_deadline() is None or timer.due <= ref.next_deadline()
        assert index.next_deadline() == ref.next_deadline()
        assert sorted(r.task_id for r in index) == sorted(ref.recs)
        for run in ("r1", "r2"):
            assert index.children(run) == sorted(
                (r for r in ref.recs.values() if r.parent_run_id == run),
                key=lambda r: r.task_id)
        for key in ("k1", "k2"):
            assert index.debouncing(key) == sorted(
                (r for r in ref.recs.values()
                 if r.debounce_key == key and r.state == State.QUEUED),
                key=lambda r: r.task_id)
        assert index.leased() == sorted((r for r in ref.recs.values() if r.leased),
                                        key=lambda r: r.task_id)


class _Timer:
    """The queue's deadline timer as the index drives it: it looks up the next deadline
    when it starts sleeping, and after a change only asks whether a nearer one was
    pushed (``nearest_pushed``), never the heap."""

    def __init__(self, index: LiveTasks) -> None:
        self.index = index
        self.due: int | None = None
        self.look()

    def look(self) -> None:
        self.index.nearest_pushed()
        self.due = self.index.next_deadline()

    def changed(self) -> None:
        pushed = self.index.nearest_pushed()
        if pushed is not None and (self.due is None or pushed < self.due):
            self.look()  # woken: it sleeps again until the nearer deadline


def test_nearest_pushed_is_the_earliest_deadline_added_since_it_was_last_asked() -> None:
    index = LiveTasks()
    assert index.nearest_pushed() is None
    late = model.new_task("t1", "a", 0, not_before_ms=500)
    index.put(late)
    index.put(model.claim(model.new_task("t2", "a", 0), "w", 0, 300))  # its lease: 300
    assert index.nearest_pushed() == 300
    assert index.nearest_pushed() is None  # forgotten once answered
    index.hold("t1")
    index.release("t1")  # its change did not commit: its deadlines are pushed back
    assert index.nearest_pushed() == 500
    index.put(model.succeed(index.get("t2"), 1, 10))  # a change that pushes nothing
    assert index.nearest_pushed() is None


def test_the_parent_check_reads_the_engines_table_of_runs() -> None:
    from palyra.engine import RUN_TABLE
    from palyra.tasks.parent import RUNS
    assert RUNS == RUN_TABLE
