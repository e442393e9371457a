"""The writer's open LMDB transaction and the answered frames waiting to go into it.

A frame is answered before LMDB holds it (``write.writer`` says why). Until
then it waits here: its writes are put into the one open write transaction
together with other answered frames (:meth:`Applier.apply`), and that
transaction commits to LMDB, without a flush, for many frames at once
(:meth:`Applier.commit`). The event ids of frames still waiting are kept, so
an id check sees them before LMDB does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from palyra.journal._env import JournalEnv
from palyra.journal.write.durable import Durability, RecordingTxn


class Applier:
    """Answered frames, the open transaction they go into, and its commit."""

    def __init__(self, env: JournalEnv, durable: Durability,
                 on_applied: Callable[[], None] = lambda: None) -> None:
        self._env = env
        self._durable = durable
        self._on_applied = on_applied  # after each LMDB commit that held frames
        self.open: Any = None  # the write transaction applied frames went into
        self.frames = 0  # frames applied to it, not yet committed
        self.answered: list[RecordingTxn] = []  # answered, not yet put into it
        self.ops = 0  # writes of the answered frames
        self.ids: set[bytes] = set()  # event ids the answered frames claim

    def add(self, frame: RecordingTxn, ids: Iterable[bytes]) -> None:
        """An answered frame, to be applied later."""
        self.answered.append(frame)
        self.ops += len(frame.ops)
        self.ids.update(ids)

    def txn(self) -> Any:
        """The open write transaction (answered frames may still wait outside it)."""
        if self.open is None:
            self.open = self._env.env.begin(write=True)
        return self.open

    def read_txn(self) -> Any:
        """The open write transaction holding every answered frame (for a read)."""
        self.apply()
        return self.txn()

    def unsettled(self) -> bool:
        """True while LMDB has not committed some answered frame."""
        return bool(self.frames or self.answered)

    def apply(self) -> None:
        """Put the answered frames' writes into the open LMDB transaction."""
        answered = self.answered
        if not answered:
            return
        self.answered, self.ops = [], 0
        self.ids.clear()
        try:
            self._durable.apply(answered)
            self.frames += len(answered)
        except BaseException as exc:
            self._env.unapplied = exc  # reads refuse until a reopen replays the frames
            self._env.visible.set()

    def commit(self) -> None:
        """Commit the open LMDB transaction (the frames it holds are durable already)."""
        self.apply()
        txn, self.open = self.open, None
        if txn is None:
            return
        frames, self.frames = self.frames, 0
        try:
            if frames:
                self._durable.commit_open(txn)
                self._on_applied()
            else:
                txn.abort()
        except BaseException as exc:
            self._env.unapplied = exc  # reads refuse until a reopen replays the frames
        finally:
            self._env.visible.set()
