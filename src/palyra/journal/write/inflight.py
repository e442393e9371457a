"""The second frame in flight: an append frame written and answered off the writer's thread.

While one frame is being written (its ``O_DSYNC`` write releases the GIL), the
writer plans and frames the next batch (``write.writer`` lays out the
lifecycle and the crash reasoning). The write of a frame handed over here
happens on the :class:`LogThread`, then, on that thread, its callers are
answered; the writer later collects the :class:`Flight` (:meth:`LogThread.wait`)
before it hands over the next one, so at most one frame is written at a time
and the writes reach the file in the order their frames were numbered.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal.write.answer import fail, resolve
from palyra.journal.write.apply import Applier
from palyra.journal.write.durable import Durability, RecordingTxn, Slot
from palyra.journal.write.plan import CommitPlan, Heads
from palyra.journal.write.requests import Append
from palyra.journal.write.stats import WriterStats

LOG_THREAD = "palyra-journal-log"


class Flight:
    """One append frame between its reservation and the writer's collecting it."""

    __slots__ = ("batch", "before", "began", "error", "failure", "frame", "ids", "landed",
                 "live", "observe", "plan", "slot")  # fmt: skip

    def __init__(self, batch: list[Append], live: list[Append], plan: CommitPlan,
                 frame: RecordingTxn, slot: Slot, before: tuple[int, bytes, Any],
                 began: float, observe: bool) -> None:  # fmt: skip
        self.batch = batch  # every request of the frame's batch (a refused one too)
        self.live = live  # those the frame holds
        self.plan = plan
        self.frame = frame
        self.slot = slot
        self.before = before  # (next position, head, tree) the frame was planned on
        self.began = began
        self.observe = observe  # counted in the commit histograms when it lands
        # Set when it is handed over (a frame written on the writer's thread needs neither):
        # the event ids it claims, and a lock held until it was written and answered.
        self.ids: set[bytes] | frozenset[bytes] = frozenset()
        self.landed: Any = None
        self.error: BaseException | None = None  # the write failed: nothing was answered
        self.failure: BaseException | None = None  # the answer failed after a durable write


class LogThread:
    """Writes handed-over frames, one at a time, in order, and answers their callers."""

    def __init__(self, write: Callable[[Flight], None], answer: Callable[[Flight], None]) -> None:
        self._write = write
        self._answer = answer
        self._inbox: queue.SimpleQueue[Flight | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=LOG_THREAD, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        inbox = self._inbox
        while (flight := inbox.get()) is not None:
            try:
                self._write(flight)
            except BaseException as exc:  # the writer fails it, and every frame planned on it
                flight.error = exc
                flight.landed.release()
                continue
            try:
                self._answer(flight)
            except BaseException as exc:  # durable all the same: the writer raises it
                flight.failure = exc
            flight.landed.release()

    def send(self, flight: Flight) -> None:
        """Write ``flight`` and answer its callers on the log thread."""
        flight.ids = {key for key, _position in flight.plan.claims}
        flight.landed = landed = threading.Lock()
        landed.acquire()
        self._inbox.put(flight)

    @staticmethod
    def wait(flight: Flight) -> None:
        """Until ``flight`` was written and answered, or its write failed."""
        flight.landed.acquire()

    def stop(self) -> None:
        """End the thread (the writer collected every flight first)."""
        self._inbox.put(None)
        self._thread.join()


class FramesInFlight:
    """The writer's side of a flight: collect it, or take it back (a mixin of ``Writer``)."""

    _durable: Durability
    _pending: Applier
    _flying: Flight | None
    _failed_flights: int
    _session_heads: dict[str, bytes]
    _tape_next: dict[str, int]
    chain: Heads
    stats: WriterStats

    if TYPE_CHECKING:
        def _answer(self, batch: list[Any], plan: CommitPlan, calls: int = 0,
                    began: float | None = None) -> None: ...

    def _write_flight(self, flight: Flight) -> None:
        self._durable.write(flight.slot)  # on the log thread

    def _collect(self) -> bool:
        """Wait for the frame in flight to be written and answered; False if its write failed.

        A frame that failed is taken back with everything planned on it (``_rollback``).
        """
        flight = self._flying
        if flight is None:
            return True
        self._flying = None
        LogThread.wait(flight)
        if flight.error is not None:
            self._rollback(flight)
            self._fail(flight, flight.error)
            return False
        if flight.slot.carried:
            self._durable.landed(flight.slot)
        self._pending.add(flight.frame, flight.ids)
        if flight.failure is not None:
            raise flight.failure
        return True

    def _rollback(self, flight: Flight) -> None:
        """Take back a frame whose write failed, and every frame reserved after it."""
        self._failed_flights += 1
        self._durable.unreserve(flight.slot)
        chain = self.chain
        chain.next_position, chain.head, chain.tree = flight.before
        # They may hold what the frame planned: refilled from LMDB, which holds
        # every frame written (the answered ones once applied).
        self._session_heads.clear()
        self._tape_next.clear()

    def _refuse(self, batch: list[Append], began: float, observe: bool) -> None:
        """Answer a batch whose every event id is taken, once the frame in flight is
        written: an id it claims is taken only if its write succeeds (if it fails, the
        batch fails with it, ``UNAVAILABLE``, and a retry finds the id free)."""
        if self._flying is not None and not self._collect():
            fail(batch, PalyraError("an earlier commit failed", code=ErrorCode.UNAVAILABLE))
        else:
            resolve(batch)
        if observe:
            self.stats.timings.observe(began, batch, 0)

    def _fail(self, flight: Flight, exc: BaseException) -> None:
        fail(flight.batch, exc)
        if flight.observe:
            self.stats.timings.observe(flight.began, flight.batch)

    def _land_flight(self, flight: Flight) -> None:
        self._land(flight.batch, flight.live, flight.plan, flight.began, flight.observe)

    def _land(self, batch: list[Append], live: list[Append], plan: CommitPlan, began: float,
              observe: bool) -> None:  # fmt: skip
        """A written frame: tell its callers and followers (on either thread), its
        timings counted with it (``observe``) before the answer: once a caller is woken its
        event loop wants the GIL, and work left here would hold it up (every lone append)."""
        self._answer(batch, plan, len(live), began if observe else None)
