"""The serial walk over a data dir's records, checkpoints, compactions and tree.

:class:`StoreWalk` walks the log in chunks of :data:`CHUNK` records, each in a
fresh read transaction (a long verify must not pin one snapshot), and after each
chunk checks the compactions it held and the tree rows of its records. It can
walk a bounded run of keys and resume where it stopped, so the parallel verifier
(``verify.parallel``) walks serially exactly the runs it could not judge: the
state it hands over is the state a serial walk has at that record, so the
failure reported is the one a serial verify reports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import takewhile

import msgspec

from palyra.journal import _env as names
from palyra.journal._env import JournalEnv
from palyra.journal.format.record import CheckpointRecord, scoped_key, u64_key
from palyra.journal.read import reads as _reads
from palyra.journal.verify.chainwalk import ChainVerifier, Tampered
from palyra.journal.verify.covers import MARKER, covers_in
from palyra.journal.verify.covers import check as check_cover
from palyra.journal.verify.tree import TreeCheck

CHUNK = 4096
"""Records per read transaction; the parallel verifier's segments are this size too."""

_PAST_ALL = 1 << 64


class UnindexedTombstone:
    """The first tombstone whose ``_by_session`` key is missing, raised once the chain checks out.

    Chain problems are reported first (as "Verifying" orders them), so a miss is
    kept, not raised, while the walk goes on; only the first one matters.
    """

    def __init__(self) -> None:
        self.first: Tampered | None = None

    def check(self, env: JournalEnv, verifier: ChainVerifier) -> None:
        """Look up the tombstones the verifier noted since the last call."""
        noted = verifier.tombstones
        if not noted:
            return
        if self.first is None:
            with env.read() as txn:
                db = env.dbs[names.BY_SESSION]
                for session_id, first, last in noted:
                    if txn.get(scoped_key(session_id, last), db=db) is None:
                        self.first = Tampered(first, "index: _by_session has no entry for this "
                                                    "pruned record (its session id was changed?)")
                        break
        noted.clear()

    def raise_first(self) -> None:
        """Raise the first miss, if any."""
        if self.first is not None:
            raise self.first


class StoreWalk:
    """The walk's state: the verifier, the checkpoints still to check, the tree check."""

    def __init__(
        self, env: JournalEnv, verifier: ChainVerifier, tree: TreeCheck | None = None,
        progress: Callable[[int], None] | None = None,
        unindexed: UnindexedTombstone | None = None,
    ) -> None:  # fmt: skip
        self.env, self.verifier, self.tree = env, verifier, tree
        self.progress, self.unindexed = progress, unindexed
        try:
            self.pending = sorted(_reads.checkpoints(env), key=lambda c: (c.position, c.ts_ms))
        except msgspec.DecodeError as exc:
            raise Tampered(None, f"undecodable checkpoint record ({exc})") from exc
        # Records holding a covering event (a compaction) are noted as they pass, and
        # their digests recomputed once the chain up to them checked out (outside the
        # read txn).
        verifier.marker = MARKER
        self.covering = verifier.noted
        if unindexed is not None:
            verifier.tombstones = []
        self.leaves = verifier.leaves = [] if tree is not None else None

    def check_checkpoints(self, upto: int) -> None:
        """Check the pending checkpoints at or before ``upto`` against the chain here."""
        pending = self.pending
        while pending and pending[0].position <= upto:
            _check_checkpoint(self.verifier, pending.pop(0))

    def walk(self, below: bytes | None = None) -> None:
        """Walk from the verifier's position to the end, or to the first key ``>= below``."""
        verifier, env, leaves, tree = self.verifier, self.env, self.leaves, self.tree
        more = True
        try:
            while more:
                with env.read() as txn:
                    cursor = txn.cursor(db=env.dbs[names.EVENTS])
                    if not cursor.set_range(u64_key(verifier.position + 1)):
                        break
                    records: Iterator[tuple[bytes, bytes]] = iter(cursor)
                    if below is not None:
                        records = takewhile(lambda item: item[0] < below, records)
                    read = 0
                    while read < CHUNK:  # then a fresh txn: do not pin one snapshot
                        until = self.pending[0].position if self.pending else _PAST_ALL
                        done = verifier.stored_run(records, until, CHUNK - read, self.progress)
                        if not done:
                            more = False
                            break
                        read += done
                        self.check_checkpoints(verifier.position)
                    if tree is not None and leaves:  # in the txn the records were read in
                        tree.chunk(txn, leaves)
                        leaves.clear()
                self.chunk_done()
        except Tampered as problem:
            self.failed(problem)
            raise

    def chunk_done(self) -> None:
        """After a chunk: its compactions, and its tombstones' index entries."""
        check_covers(self.env, self.covering, self.verifier.position + 1)
        if self.unindexed is not None:
            self.unindexed.check(self.env, self.verifier)

    def failed(self, problem: Tampered) -> None:
        """A bad compaction before the problem found in the chain is reported first."""
        check_covers(self.env, self.covering, problem.position or self.verifier.position + 1)

    def end(self) -> None:
        """After the last record: the checkpoints beyond it."""
        self.check_checkpoints(_PAST_ALL)


def check_covers(env: JournalEnv, covering: list[bytes], before: int) -> None:
    """Recompute the digest of each noted covering event positioned before ``before``."""
    for value in covering:
        try:
            found = covers_in(value)
        except ValueError as exc:  # msgspec.DecodeError is a ValueError
            raise Tampered(before, f"undecodable record ({exc})") from exc
        for cover in found:
            if isinstance(cover, tuple):
                position, reason = cover
                if position < before:
                    raise Tampered(position, f"malformed compaction: {reason}")
                continue
            if cover.position >= before:
                continue
            problem = check_cover(env, cover)
            if problem is not None:
                raise Tampered(cover.position, problem)
    covering.clear()


def _check_checkpoint(verifier: ChainVerifier, record: CheckpointRecord) -> None:
    verifier.checkpoint(
        record.position, record.head, record.ts_ms, record.public_key, record.signature,
        f"checkpoint record at position {record.position}",
    )
