"""The writer's commits other than appends: checkpoints, tree signatures, retention, tree start.

Each reads its own writes (the stored checkpoint, the tree, the records it
rewrites) and so commits in a frame of its own (so do the tree rows a journal older
than the tree gets on the writer's first start); they share the writer's state,
hence a mixin of :class:`palyra.journal.write.writer.Writer`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import lmdb

from palyra.core.chain import GENESIS, checkpoint_message
from palyra.core.errors import InvalidArgument, PalyraError
from palyra.journal import _env as names
from palyra.journal._env import JournalEnv
from palyra.journal._types import Checkpoint as SignedCheckpoint
from palyra.journal.format.record import (
    RECORD_VERSION,
    RETENTION_SESSION,
    CheckpointRecord,
    encode_record,
    record_hashes,
    u64_key,
)
from palyra.journal.read.tlog import StoredTree
from palyra.journal.retention.prune import PruneResult, tombstone_prefix
from palyra.journal.tlog.merkle import extend
from palyra.journal.tlog.note import NoteError
from palyra.journal.write.answer import fail, resolve
from palyra.journal.write.apply import Applier
from palyra.journal.write.commitlog import Op
from palyra.journal.write.durable import RecordingTxn
from palyra.journal.write.plan import CommitPlan, Heads
from palyra.journal.write.prune_plan import pruned_event_plan
from palyra.journal.write.requests import Checkpoint, Prune, TreeSign, Waiting
from palyra.journal.write.tree_sign import note_to_store

if TYPE_CHECKING:
    from palyra.journal.write.durable import Durability


class OtherCommits:
    """Checkpoint, tree-sign and prune commits (see the module doc)."""

    _env: JournalEnv
    _pending: Applier
    _durable: Durability
    _session_heads: dict[str, bytes]
    chain: Heads
    pruned_through: int

    if TYPE_CHECKING:
        def _retried(self, attempt: Callable[[], Any]) -> Any: ...
        def _log(self, ops: list[Op]) -> RecordingTxn: ...
        def _answer_other(self, request: Waiting, plan: CommitPlan,
                          frame: RecordingTxn) -> None: ...
        def _stored_head(self, session_id: str) -> bytes: ...

    def _complete_tree(self, per_frame: int) -> None:
        """Read the tree's frontier; add the records it lacks (a journal older than the tree).

        On the writer's first start, before it serves: in frames of its own, oldest
        first, of ``per_frame`` records each.
        """
        dbs = self._env.dbs
        stored = StoredTree(self._pending.read_txn(), dbs[names.TLOG])
        tree = stored.frontier()
        after = stored.entry(tree.size - 1)[1] if tree.size else 0
        while after < self.chain.next_position - 1:
            entries: list[tuple[bytes, int]] = []
            cursor = self._pending.read_txn().cursor(db=dbs[names.EVENTS])
            found = cursor.set_range(u64_key(after + 1))
            while found and len(entries) < per_frame:
                last = int.from_bytes(cursor.key(), "big")
                entries.append((record_hashes(cursor.value())[0], last))
                found = cursor.next()
            tree, rows = extend(tree, entries, stored.prefix)
            frame = self._retried(partial(self._log, [(names.TLOG, k, v) for k, v in rows]))
            self._pending.add(frame, ())
            after = entries[-1][1]
        self._pending.commit()
        self.chain.tree = tree

    def _commit_checkpoint(self, request: Checkpoint) -> None:
        """Sign the head after every frame before it; its one write is planned."""
        chain = self.chain
        position = chain.next_position - 1
        ts_ms = time.time_ns() // 1_000_000
        signer = request.signer
        signature = signer.sign(checkpoint_message(position, chain.head, ts_ms))
        record = CheckpointRecord(
            RECORD_VERSION, position, chain.head, ts_ms, signer.public_key, signature
        )
        op: Op = (names.CHECKPOINTS, u64_key(position) + u64_key(ts_ms), encode_record(record))
        try:
            frame = self._retried(lambda: self._log([op]))
        except Exception as exc:
            fail([request], exc)
            return
        request.result = SignedCheckpoint(
            position, chain.head.hex(), ts_ms, signer.public_key.hex(), signature.hex()
        )
        self._answer_other(
            request, CommitPlan.empty(chain.head, chain.tree, chain.next_position, [op]), frame
        )

    def _commit_tree_sign(self, request: TreeSign) -> None:
        """Sign the tree as it stands (or store cosignatures); refuse anything that forks it.

        The answer is the stored note: the new one, or the last one when the tree
        has not grown since (nothing is written then).
        """
        dbs, key = self._env.dbs, StoredTree.key_of()
        try:
            txn = self._pending.read_txn()
            raw = txn.get(key, db=dbs[names.TLOG_CHECKPOINTS])
            stored = None if raw is None else bytes(raw)
            note = note_to_store(request, stored, self.chain.tree,
                                 StoredTree(txn, dbs[names.TLOG]).hash_at)
            if note is None:  # the tree has not grown: the stored note stands
                request.result = stored
                resolve([request])
                return
            op: Op = (names.TLOG_CHECKPOINTS, key, note)
            frame = self._retried(lambda: self._log([op]))
        except (PalyraError, NoteError) as exc:  # a refusal: the caller's error as it is
            request.error = (exc if isinstance(exc, PalyraError)
                             else InvalidArgument(str(exc)))  # fmt: skip
            resolve([request])
            return
        except Exception as exc:
            fail([request], exc)
            return
        request.result = note
        chain = self.chain
        self._answer_other(
            request, CommitPlan.empty(chain.head, chain.tree, chain.next_position, [op]), frame
        )

    def _commit_prune(self, request: Prune) -> None:
        """Tombstones at the tail, their ``journal.pruned`` event at the head, one frame.

        A prune reads the records it rewrites and its event's session head, so
        it writes into a child of the open transaction (aborted alone on failure).
        """
        try:
            result, plan, frame = self._retried(lambda: self._pruned(request))
        except Exception as exc:
            fail([request], exc)
            return
        request.result = result
        if result.records:
            self.pruned_through = result.through
        self._answer_other(request, plan, frame)

    def _pruned(self, request: Prune) -> tuple[PruneResult, CommitPlan, RecordingTxn]:
        parent = self._pending.read_txn()  # every answered frame is in it: the prune reads them
        # Read before the child begins: a parent with a child open takes no reads.
        claims_head = self._session_heads.get(RETENTION_SESSION) or self._stored_head(
            RETENTION_SESSION
        )
        txn = RecordingTxn(self._env.env.begin(write=True, parent=parent), self._durable.names)
        try:
            result, plan = self._tombstones(txn, request, claims_head)
            self._durable.log_frame(txn, settled=not self._pending.unsettled())
        except BaseException:
            with contextlib.suppress(lmdb.Error):
                txn.txn.abort()
            raise
        return result, plan, txn

    def _tombstones(
        self, txn: RecordingTxn, request: Prune, claims_head: bytes
    ) -> tuple[PruneResult, CommitPlan]:
        order, watermark, env, chain = request.order, self.pruned_through, self._env, self.chain
        done = tombstone_prefix(env, txn, watermark, chain.next_position - 1, order)
        if done is None:
            raw = txn.get(u64_key(watermark), db=env.dbs[names.EVENTS]) if watermark else None
            at = record_hashes(raw)[1] if raw is not None else GENESIS
            return PruneResult(0, watermark, 0, 0, 0, at.hex()), CommitPlan.empty(
                chain.head, chain.tree, chain.next_position, [])
        result, plan = pruned_event_plan(request, done, Heads(
            chain.next_position, chain.head, {RETENTION_SESSION: claims_head}, {}, chain.tree),
            env.config)
        dbs = env.dbs
        for name, key, value in plan.ops:
            assert value is not None  # a planned append only puts
            if not txn.put(key, value, db=dbs[name], overwrite=name != names.EVENT_IDS):
                raise AssertionError(f"fresh event id {key!r} is already taken")
        return result, plan
