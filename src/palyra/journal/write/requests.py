"""What callers hand the writer: a tagged union of ``Append | Checkpoint | Prune | TreeSign``.

Each request carries the caller's event loop and future; the writer fills in
``result`` (an append's ``StoredEvent`` list, a signed checkpoint, a
``PruneResult``) or ``error`` and then resolves the future on that loop.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from palyra.journal._types import Lease, RowExpectation
from palyra.journal.format.signing import Signer
from palyra.journal.retention.prune import PruneOrder
from palyra.journal.tlog.note import Witness
from palyra.journal.write.prepare import PreparedEvent


class Answer(Protocol):
    """What a request is answered through: an ``asyncio.Future``, or any object with its
    three methods (``JournalStore.submit_answering``), called on the caller's loop."""

    def done(self) -> bool:
        """True once answered (or cancelled): the writer's answer is then dropped."""

    def set_result(self, result: Any, /) -> None:
        """The request committed: its result."""

    def set_exception(self, exception: BaseException, /) -> None:
        """The request failed: why."""


class Waiting:
    """A caller waiting on its event loop for the writer's answer."""

    __slots__ = ("error", "future", "loop", "result")

    def __init__(self, loop: asyncio.AbstractEventLoop, future: Answer) -> None:
        self.loop = loop
        self.future = future
        self.result: Any = None
        self.error: BaseException | None = None


class Append(Waiting):
    """One ``append`` call: its prepared events commit together or not at all."""

    __slots__ = ("events",)

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        future: Answer,
        events: list[PreparedEvent],
    ) -> None:
        # Waiting's fields set here, not through super(): one append per call to
        # the journal, so one call fewer on every caller's path.
        self.loop = loop
        self.future = future
        self.result: Any = None
        self.error: BaseException | None = None
        self.events = events


class FencedAppend(Append):
    """An append that commits only while ``fence`` is still its name's current lease.

    Its own class, so a plain append carries no field for it: LMDB's writer
    (one daemon, which owns every lease) treats it as any append.
    """

    __slots__ = ("fence",)

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        future: Answer,
        events: list[PreparedEvent],
        fence: Lease,
    ) -> None:
        super().__init__(loop, future, events)
        self.fence = fence


class ExpectingAppend(Append):
    """An append that commits only while every row of ``expect`` holds its expected value.

    LMDB's writer treats it as any append: one daemon writes that journal, and its
    callers decide on the rows as they hold them in memory (only a shared journal's
    callers attach expectations).
    """

    __slots__ = ("expect",)

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        future: Answer,
        events: list[PreparedEvent],
        expect: tuple[RowExpectation, ...],
    ) -> None:
        super().__init__(loop, future, events)
        self.expect = expect


class FencedExpectingAppend(ExpectingAppend):
    """An expecting append that also commits only while ``fence`` is its name's current
    lease (a singleton's task-queue write: a compare-and-set on the task's row, made
    by the lease holder only)."""

    __slots__ = ("fence",)

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        future: Answer,
        events: list[PreparedEvent],
        expect: tuple[RowExpectation, ...],
        fence: Lease,
    ) -> None:
        super().__init__(loop, future, events, expect)
        self.fence = fence


class Checkpoint(Waiting):
    """Sign the head as it stands after every append queued before it."""

    __slots__ = ("signer",)

    def __init__(
        self, loop: asyncio.AbstractEventLoop, future: Answer, signer: Signer
    ) -> None:
        super().__init__(loop, future)
        self.signer = signer


class TreeSign(Waiting):
    """Sign the transparency log's checkpoint as the tree stands after every append
    queued before it, or add witnesses' cosignatures to the signed one (``cosigned``).
    ``origin`` empty: the stored checkpoint's origin, else the key's default one."""

    __slots__ = ("cosigned", "origin", "signer", "witnesses")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        future: Answer,
        signer: Signer,
        origin: str,
        cosigned: bytes | None = None,
        witnesses: tuple[Witness, ...] = (),
    ) -> None:
        super().__init__(loop, future)
        self.signer = signer
        self.origin = origin
        self.cosigned = cosigned
        self.witnesses = witnesses


class Prune(Waiting):
    """One batch of retention (see ``retention.prune``)."""

    __slots__ = ("order",)

    def __init__(
        self, loop: asyncio.AbstractEventLoop, future: Answer, order: PruneOrder
    ) -> None:
        super().__init__(loop, future)
        self.order = order


Request = Append | Checkpoint | Prune | TreeSign
