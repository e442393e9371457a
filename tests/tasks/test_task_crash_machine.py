"""Crash anywhere in claim -> heartbeat -> complete, and during recovery itself.

A hypothesis state machine drives a real queue over a real journal. Its
rules enqueue, claim, heartbeat, succeed and fail (with the epochs workers
hold, including stale ones), and crash: the process "dies" (the store is
dropped without any queue shutdown; every change was already one atomic
commit) and restarts, sometimes dying again part-way through recovery. After
every step: no task is completed twice (the journal has at most one
``task.succeeded`` per task), a stale epoch never wrote, and after a restart
no task is left leased by a dead worker (0 stuck tasks).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections import Counter
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal import JournalConfig, JournalStore
from palyra.tasks import State, TaskQueue


class _Crash(Exception):
    """The simulated process death inside recovery."""


class TaskCrashMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(tempfile.mkdtemp(prefix="palyra-taskcrash-"))
        self.store: JournalStore | None = None
        self.queue: TaskQueue | None = None
        self.leases: list[tuple[str, int]] = []  # (task_id, epoch) a worker of this life holds
        self.old_leases: list[tuple[str, int]] = []  # leases of dead workers or lapsed
        self.tasks: list[str] = []
        self._open()

    def _run(self, coro):  # type: ignore[no-untyped-def]
        return self.loop.run_until_complete(coro)

    def _open(self, crash_after: int | None = None) -> None:
        self.store = JournalStore.open(self.dir / "data", config=JournalConfig(sync=False))
        self.queue = TaskQueue(self.store)
        if crash_after is not None:
            real, calls = self.store.append, [0]

            async def dying(drafts):  # type: ignore[no-untyped-def]
                calls[0] += 1
                if calls[0] > crash_after:
                    raise _Crash
                return await real(drafts)

            self.store.append = dying  # type: ignore[method-assign]
        self._run(self.queue.start())
        self.store.append = type(self.store).append.__get__(self.store)  # type: ignore[method-assign]

    def _die(self) -> None:
        assert self.store is not None and self.queue is not None
        timer = self.queue._timer  # the process is gone: no orderly queue shutdown
        if timer is not None:
            timer.cancel()
            self.loop.run_until_complete(asyncio.gather(timer, return_exceptions=True))
        self.store.close()
        self.store = self.queue = None
        self.old_leases += self.leases
        self.leases = []

    @rule(priority=st.integers(0, 3))
    def enqueue(self, priority: int) -> None:
        assert self.queue is not None
        task, _ = self._run(self.queue.enqueue("k", priority=priority, max_attempts=3))
        self.tasks.append(task.task_id)

    @precondition(lambda self: self.queue is not None)
    @rule()
    def claim(self) -> None:
        assert self.queue is not None
        ready = [t for t in self.queue.page(limit=500)[0] if t.state == State.QUEUED]
        if not ready:
            return
        # Backoff would make a retried task wait: jump its due time for the test.
        for t in ready:
            if t.not_before_ms:
                self.queue._live.put(type(t)(**{**_fields(t), "not_before_ms": 0}))
        claimed = self._run(asyncio.wait_for(self.queue.claim("w", lease_ms=60_000), 1))
        self.leases.append((claimed.task_id, claimed.lease_epoch))

    @precondition(lambda self: bool(self.leases))
    @rule(data=st.data(), op=st.sampled_from(["heartbeat", "succeed", "fail"]))
    def worker_write(self, data: st.DataObject, op: str) -> None:
        assert self.queue is not None
        task_id, epoch = data.draw(st.sampled_from(self.leases))
        call = {"heartbeat": lambda: self.queue.heartbeat(task_id, epoch),  # type: ignore[union-attr]
                "succeed": lambda: self.queue.succeed(task_id, epoch),  # type: ignore[union-attr]
                "fail": lambda: self.queue.fail(task_id, epoch, "boom")}[op]  # type: ignore[union-attr]
        try:
            self._run(call())
        except PalyraError as exc:
            assert exc.code is ErrorCode.LEASE_STALE
            self.leases.remove((task_id, epoch))
            return
        if op != "heartbeat":
            self.leases.remove((task_id, epoch))

    @precondition(lambda self: bool(self.old_leases) and self.queue is not None)
    @rule(data=st.data(), op=st.sampled_from(["heartbeat", "succeed", "fail"]))
    def dead_worker_writes(self, data: st.DataObject, op: str) -> None:
        """A worker from before a crash (or whose lease lapsed) must be refused."""
        assert self.queue is not None
        queue = self.queue
        # Prefer a task some live worker holds again: there only the epoch can refuse.
        retaken = [(t, e) for t, e in self.old_leases if queue.require(t).leased]
        task_id, epoch = data.draw(st.sampled_from(retaken or self.old_leases))
        call = {"heartbeat": lambda: queue.heartbeat(task_id, epoch),
                "succeed": lambda: queue.succeed(task_id, epoch),
                "fail": lambda: queue.fail(task_id, epoch, "late")}[op]
        try:
            self._run(call())
        except PalyraError as exc:
            assert exc.code is ErrorCode.LEASE_STALE
        else:
            raise AssertionError(f"a dead worker's {op} with epoch {epoch} was accepted")

    @rule(crash_in_recovery=st.one_of(st.none(), st.integers(0, 3)))
    def crash_and_restart(self, crash_in_recovery: int | None) -> None:
        self._die()
        if crash_in_recovery is not None:
            try:
                self._open(crash_after=crash_in_recovery)
            except _Crash:
                self._die()
            else:
                self._die()
        self._open()
        assert self.queue is not None
        stuck = [t for t in self.queue.page(limit=500)[0]
                 if t.state in (State.RUNNING, State.CANCEL_REQUESTED)]
        assert stuck == [], stuck

    @invariant()
    def never_completed_twice(self) -> None:
        if self.store is None:
            return
        done = Counter(e.payload["task_id"] for e in self.store.read_range(0, 10_000)
                       if e.kind == "task.succeeded")
        assert all(n == 1 for n in done.values()), done

    @invariant()
    def every_task_is_known_and_consistent(self) -> None:
        if self.queue is None:
            return
        for task_id in self.tasks:
            rec = self.queue.require(task_id)
            assert rec.attempts <= rec.max_attempts
            if rec.state == State.SUCCEEDED:
                assert rec.lease_epoch >= 1

    def teardown(self) -> None:
        if self.store is not None:
            self._die()
        self.loop.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _fields(rec):  # type: ignore[no-untyped-def]
    return {f: getattr(rec, f) for f in rec.__struct_fields__}


TaskCrashMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=30,
                                              deadline=None)
test_task_crash_machine = TaskCrashMachine.TestCase
