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
from typing import Any

from palyra.journal.write.durable import RecordingTxn, Slot
from palyra.journal.write.plan import CommitPlan
from palyra.journal.write.requests import Append

LOG_THREAD = "palyra-journal-log"


class Flight:
    """One append frame between its reservation and the writer's collecting it."""

    __slots__ = ("batch", "before", "began", "error", "failure", "frame", "ids", "landed",
                 "live", "observe", "plan", "slot")  # fmt: skip

    def __init__(self, batch: list[Append], live: list[Append], plan: CommitPlan,
                 frame: RecordingTxn, slot: Slot, before: tuple[int, bytes, Any],
                 began: float) -> None:  # fmt: skip
        self.batch = batch  # every request of the frame's batch (a refused one too)
        self.live = live  # those the frame holds
        self.plan = plan
        self.frame = frame
        self.slot = slot
        self.before = before  # (next position, head, tree) the frame was planned on
        self.began = began
        self.observe = True  # counted in the commit histograms when collected
        self.ids = {key for key, _position in plan.claims}
        # Held until the write and the answer are done (or the write failed).
        self.landed = threading.Lock()
        self.landed.acquire()
        self.error: BaseException | None = None  # the write failed: nothing was answered
        self.failure: BaseException | None = None  # the answer failed after a durable write


class LogThread:
    """Writes handed-over frames, one at a time, in order, and answers their callers."""

    def __init__(self, write: Callable[[Flight], None], answer: Callable[[Flight], None]) -> None:
        self._write = write
        self._answer = answer
        self._inbox: queue.SimpleQueue[Flight | None] = queue.SimpleQueue()
        self.send: Callable[[Flight], None] = self._inbox.put
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

    @staticmethod
    def wait(flight: Flight) -> None:
        """Until ``flight`` was written and answered, or its write failed."""
        flight.landed.acquire()

    def stop(self) -> None:
        """End the thread (the writer collected every flight first)."""
        self._inbox.put(None)
        self._thread.join()
