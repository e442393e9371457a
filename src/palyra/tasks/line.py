"""The queue's line of claimers: claims waiting for a ready task, first come first served.

A daemon's idle worker slots each wait in line (a channel daemon: every dispatch and send
slot), and each change that may make a task ready hands ready tasks out along the line.
Walking every claimer per change cost a call or three per idle slot per message, though
the slots of one worker all take the same kinds and a claim for kinds with nothing ready
fails alike for each. So the line keeps one queue per set of kinds, each in arrival
order, and a global arrival number on each claimer: the first in line among some sets
of kinds is the head with the lowest number, found by looking at one head per set.
Handing out along this line gives each task to the claimer the single queue would have.

Pure: no I/O, no loop; the queue calls it on its loop.
"""

from __future__ import annotations

import collections
from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from palyra.tasks.model import TaskRecord


class ClaimAnswer(Protocol):
    """How a claim is answered: an ``asyncio.Future``, or any object with its three
    methods, called on the queue's loop (a worker's, which starts running the claimed
    task as it is answered: no future, and no loop turn to wake a waiter)."""

    def done(self) -> bool:
        """True once answered (or given up: a claim in line that is done is skipped)."""

    def set_result(self, result: TaskRecord, /) -> None:
        """The claim is durable: the claimed task."""

    def set_exception(self, exception: BaseException, /) -> None:
        """The claim failed: why (``LostClaim``: its commit failed, look again)."""


@dataclass(slots=True, eq=False)
class Claimer:
    """A claim waiting in line for a ready task of its kinds (None: any kind)."""

    owner: str
    kinds: frozenset[str] | None
    lease_ms: int
    claimed: ClaimAnswer  # answered once a claim for it is durable
    arrived: int = 0  # its place in line, set by :meth:`ClaimLine.append`


class ClaimLine:
    """Claimers in arrival order, kept as one queue per set of kinds."""

    __slots__ = ("_arrivals", "_by_kinds")

    def __init__(self) -> None:
        self._by_kinds: dict[frozenset[str] | None, collections.deque[Claimer]] = {}
        self._arrivals = 0

    def __bool__(self) -> bool:
        """Anyone in line (perhaps only claimers given up, not yet dropped)."""
        return bool(self._by_kinds)

    def append(self, claimer: Claimer) -> None:
        """``claimer`` joins the end of the line."""
        self._arrivals += 1
        claimer.arrived = self._arrivals
        queue = self._by_kinds.get(claimer.kinds)
        if queue is None:
            queue = self._by_kinds[claimer.kinds] = collections.deque()
        queue.append(claimer)

    def put_back(self, claimer: Claimer) -> None:
        """``claimer``, just taken off the head of its queue, back in its place."""
        queue = self._by_kinds.get(claimer.kinds)
        if queue is None:
            queue = self._by_kinds[claimer.kinds] = collections.deque()
        queue.appendleft(claimer)

    def first(self, kind: str | None = None,
              skip: Collection[frozenset[str] | None] = ()) -> Claimer | None:
        """The first claimer in line that takes ``kind`` (None: any claimer), its kinds
        not in ``skip``; it stays in line. Claimers given up on the way are dropped."""
        best: Claimer | None = None
        gone: list[frozenset[str] | None] = []
        for kinds, queue in self._by_kinds.items():
            if kinds in skip or (kind is not None and kinds is not None and kind not in kinds):
                continue
            while queue and queue[0].claimed.done():
                queue.popleft()
            if not queue:
                gone.append(kinds)
            elif best is None or queue[0].arrived < best.arrived:
                best = queue[0]
        for kinds in gone:
            del self._by_kinds[kinds]
        return best

    def take(self, claimer: Claimer) -> None:
        """Take ``claimer``, the head of its queue (as :meth:`first` found it), out of line."""
        queue = self._by_kinds[claimer.kinds]
        queue.popleft()
        if not queue:
            del self._by_kinds[claimer.kinds]

    def remove(self, claimed: ClaimAnswer) -> None:
        """The claimer answered through ``claimed`` leaves the line (its claim was
        cancelled while it waited)."""
        for kinds, queue in list(self._by_kinds.items()):
            kept = collections.deque(c for c in queue if c.claimed is not claimed)
            if kept:
                self._by_kinds[kinds] = kept
            else:
                del self._by_kinds[kinds]
