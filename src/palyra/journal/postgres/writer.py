"""The PostgreSQL writer thread: group commit of the same plans, one transaction each.

Callers queue requests exactly as for LMDB (``write.requests``); this thread
takes whatever is queued (up to ``max_batch_events``) and commits it in one
PostgreSQL transaction:

1. lock the ``journal_head`` row (``SELECT … FOR UPDATE``): every daemon's
   commits serialise here, and the next position and global head are the
   database's, read inside the transaction;
2. resolve the chain heads the batch needs (each session's last record, each
   run's next ``tape_seq``) from the same transaction, through the readers'
   own index look-ups (``read.reads``), unless nobody else committed since
   this thread's last commit (the head row says so), when its memory of them
   is still exact;
3. plan with the shared pure planner (``write.plan``), drop a request whose
   event id is taken and plan again, as the LMDB writer does (which of the batch's
   event ids are taken is asked with the head row's lock, in its round trip: the
   ids are the drafts', known before the plan);
4. write every op of the plan as rows of ``journal_kv`` (the deletes, if any, in one
   statement planned afresh each time; the puts and the head row's move in another),
   with the names of the entity rows it writes (``postgres.changes``, for the other
   daemons' caches), commit.

While this thread made the last commit and a batch needs nothing read under the lock,
steps 1 to 4 shrink to one statement without the lock: the plan is made on what this
thread knows, and the head row moves by compare-and-set (``postgres.head_cas``); if
another daemon committed in between, nothing is written and the locked commit follows.

Only after the commit returns are callers answered and followers fed, so an
acknowledged append is durable in PostgreSQL (``synchronous_commit``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import psycopg

from palyra.core.chain import GENESIS, checkpoint_message
from palyra.core.errors import ErrorCode, InvalidArgument, PalyraError
from palyra.journal import _env as names
from palyra.journal._types import Checkpoint as SignedCheckpoint
from palyra.journal._types import StoredEvent
from palyra.journal.format.record import (
    RECORD_VERSION,
    RETENTION_SESSION,
    CheckpointRecord,
    encode_record,
    record_hashes,
    u64_key,
)
from palyra.journal.postgres.changes import change_op, trim, trim_due
from palyra.journal.postgres.head_cas import write_if_head_is
from palyra.journal.postgres.kv import PgTxn, PgWriteTxn, PostgresEnv
from palyra.journal.postgres.lease import FENCES
from palyra.journal.postgres.statements import (
    BEGIN,
    CLOCK,
    COMMIT,
    ROWS,
    connect,
    last_in_scope,
    lock_head,
    rows_of,
    write_and_move_head,
)
from palyra.journal.postgres.watch import OwnCommits
from palyra.journal.read.follow import Deliveries
from palyra.journal.read.reads import pruned_through
from palyra.journal.read.tlog import StoredTree
from palyra.journal.retention.prune import PruneResult, tombstone_prefix
from palyra.journal.tlog.merkle import Frontier, fold
from palyra.journal.tlog.note import NoteError
from palyra.journal.write.answer import fail, resolve
from palyra.journal.write.clash import blame
from palyra.journal.write.commitlog import Op
from palyra.journal.write.expect import expected_rows, has_deadline, unmet
from palyra.journal.write.plan import CommitPlan, Heads, plan_commit
from palyra.journal.write.prune_plan import pruned_event_plan
from palyra.journal.write.requests import (
    Append,
    Checkpoint,
    ExpectingAppend,
    FencedAppend,
    FencedExpectingAppend,
    Prune,
    Request,
    TreeSign,
)
from palyra.journal.write.stats import WriterStats
from palyra.journal.write.tree_sign import note_to_store

WRITER_THREAD = "palyra-journal-pg-writer"
# Chain heads remembered between this thread's own commits; past this many
# entries the memory is dropped and refilled from the database on demand.
_MEMORY_LIMIT = 4096
_STOP = object()
# Past this many leaves stored by other daemons since this thread's last commit, the
# tree's frontier is read whole (a read per perfect subtree) rather than folded in.
_FOLD_AT_MOST = 1024
SERIALIZATION_RETRIES = 8
"""How often a transaction the database aborted for retry (SQLSTATE ``40001``, as
CockroachDB's ``SERIALIZABLE`` and PostgreSQL's ``REPEATABLE READ`` or ``SERIALIZABLE`` do
when another daemon committed first) is run again, planned afresh, before its callers
get ``UNAVAILABLE``."""



class PostgresWriter:
    """Owns the store's one writing connection and its commits."""

    def __init__(
        self,
        env: PostgresEnv,
        max_batch_events: int,
        on_commit: Callable[[list[tuple[StoredEvent, int]]], Deliveries],
        followed: Callable[[], bool] = lambda: True,
        own: OwnCommits | None = None,
        on_rows: Callable[[Iterable[tuple[str, str]], Mapping[tuple[str, str], bytes | None]], None]
        | None = None,
    ) -> None:
        self._env = env
        self._own = own
        # The entity cache's marking: called after COMMIT and before the commit's
        # positions are confirmed as this daemon's, so the watcher marks no later
        # commit of another daemon before this one (it stops short of a pending one).
        self._on_rows = on_rows
        self._max_batch = max(1, max_batch_events)
        self._on_commit = on_commit
        self._followed = followed
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.submit: Callable[[Request], None] = self._queue.put
        self.stats = WriterStats()
        self._conn = connect(env.config.dsn)
        # What this thread committed last: while the head row still says so,
        # no other daemon has committed and the memories below are exact.
        self._known: tuple[int, bytes] | None = None
        self._session_heads: dict[str, bytes] = {}
        self._tape_next: dict[str, int] = {}
        # The transparency log's frontier after that commit. Once another daemon has
        # committed since, it is dropped with the memories above but kept as
        # ``_tree_before``: the tree only grows, so it stays true of its leaves, and the
        # next commit folds in the leaves stored since (``_stored_frontier``).
        self._tree: Frontier | None = None
        self._tree_before: Frontier | None = None
        self.serialization_retries = 0  # transactions run again after a 40001
        self.head_misses = 0  # lock-free commits that found the head row moved (or ids taken)
        # Whether other daemons commit between this thread's commits: set by a miss (or
        # a locked commit finding the row moved), cleared by a locked commit finding the
        # row as this thread left it. While set, commits take the lock: a compare-and-set
        # bound to miss would cost a round trip more per commit.
        self._contended = False
        self._thread = threading.Thread(target=self._run, name=WRITER_THREAD, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Finish every queued request, then end the thread and close the connection."""
        self._queue.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        try:
            while True:
                first = self._queue.get()
                if first is _STOP:
                    return
                batch: list[Request] = [first]  # type: ignore[list-item]
                size = _weight(first)
                stopping = False
                while size < self._max_batch:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is _STOP:
                        stopping = True
                        break
                    batch.append(item)  # type: ignore[arg-type]
                    size += _weight(item)
                self._commit(batch)
                if stopping:
                    return
        finally:
            self._conn.close()

    def _commit(self, batch: list[Request]) -> None:
        began = time.perf_counter()
        appends = [r for r in batch if isinstance(r, Append)]
        if appends:
            self._commit_appends(appends)
        for request in batch:
            if isinstance(request, Checkpoint):
                self._commit_checkpoint(request)
            elif isinstance(request, TreeSign):
                self._commit_tree_sign(request)
            elif isinstance(request, Prune):
                self._commit_prune(request)
        self.stats.timings.observe(began, batch)

    # --- appends ----------------------------------------------------------

    def _commit_appends(self, batch: list[Append]) -> None:
        ids = [e.event_id.encode() for r in batch for e in r.events]
        taken: set[bytes] = set()
        try:
            planned = self._if_head_is_known(batch, ids) if self._lock_free(batch) else None
            if planned is None:
                planned = self._in_transaction(
                    lambda txn, head: self._planned(txn, head, batch, taken), self._mark_rows,
                    taken_of=(ids, taken))
            plan, live = planned
        except Exception as exc:
            self._forget()
            fail(batch, exc)
            return
        if plan is None:
            resolve(batch)  # every request clashed: each has its error
            return
        for request, answer in zip(live, plan.answers, strict=True):
            request.result = answer
        stats = self.stats
        stats.commits += 1
        stats.append_calls += len(live)
        stats.max_batch_calls = max(stats.max_batch_calls, len(batch))
        stats.appended_events += len(plan.views)
        stats.appended_bytes += plan.record_bytes
        stats.records += plan.records
        deliveries = (
            self._on_commit(list(zip(plan.views, plan.sizes, strict=True)))
            if plan.views and self._followed() else None
        )
        resolve(batch, deliveries)
        _remember(self._session_heads, plan.sessions)
        _remember(self._tape_next, plan.tape_next)
        self._tree = plan.tree

    def _planned(
        self, txn: PgTxn, head: tuple[int, bytes], batch: list[Append], taken: set[bytes]
    ) -> tuple[tuple[CommitPlan | None, list[Append]], list[Op], int, bytes]:
        """``taken``: which of the batch's event ids the journal holds already."""
        for request in batch:  # decided again on a retried transaction
            request.error = None
        live = self._unfenced(txn, batch)
        while live:
            plan = plan_commit(live, self._heads(txn, head, live))
            clash = self._first_clash(plan, live, taken)
            if clash is None:
                ops = plan.ops
                if plan.rows:
                    ops = [*ops, change_op(head[0], plan.rows)]
                return (plan, live), ops, plan.next_position, plan.head
            live = [r for r in live if r is not clash]  # it fails alone: plan again
        return (None, live), [], head[0], head[1]

    def _lock_free(self, batch: list[Append]) -> bool:
        """Whether ``batch`` may commit without the head row's lock (``postgres.head_cas``):
        this thread committed last as far as it knows, other daemons have not been
        committing between its commits, and nothing must be read under the lock (a
        fence's epoch, an expected row)."""
        return self._known is not None and not self._contended and not any(
            isinstance(r, FencedAppend | ExpectingAppend) for r in batch)

    def _if_head_is_known(self, batch: list[Append], ids: list[bytes]
                          ) -> tuple[CommitPlan, list[Append]] | None:
        """``batch`` planned on what this thread committed last and written in one
        statement if the head row still says so (``postgres.head_cas``); None, with
        nothing written, when it does not, an event id is taken or twice in the batch,
        or the commit would trim (the locked commit then does it)."""
        known, conn, own = self._known, self._conn, self._own
        assert known is not None
        if conn.broken or conn.closed:
            return None
        for request in batch:
            request.error = None
        # Heads not remembered are read outside any transaction: if another daemon
        # committed before or after the read, the head row is no longer ``known``.
        plan = plan_commit(batch, self._heads(PgTxn(conn), known, batch))
        if len(set(ids)) != len(ids) or trim_due(known[0], plan.next_position):
            return None
        ops = [*plan.ops, change_op(known[0], plan.rows)] if plan.rows else plan.ops
        if own is not None:
            own.begin(known[0], plan.next_position - 1)
        try:
            written = write_if_head_is(conn, known, (plan.next_position, plan.head), rows_of(ops),
                                       (names.EVENT_IDS, ids))  # fmt: skip
        except psycopg.errors.SerializationFailure:  # another daemon's commit came first
            written = False
        except BaseException:
            if own is not None:
                own.discard()
            conn.close()  # as after a failed locked commit: the next one connects anew
            raise
        if not written:
            if own is not None:
                own.discard()
            self._forget()
            self._contended = True
            self.head_misses += 1
            return None
        try:
            self._mark_rows((plan, batch))
        finally:
            if own is not None:
                own.confirm()
        self._known = (plan.next_position, plan.head)
        return plan, batch

    def _mark_rows(self, planned: tuple[CommitPlan | None, list[Append]]) -> None:
        plan = planned[0]
        if plan is not None and plan.rows and self._on_rows is not None:
            self._on_rows(plan.rows, plan.rows)

    def _unfenced(self, txn: PgTxn, batch: list[Append]) -> list[Append]:
        """``batch`` less the appends whose expected rows changed or whose fencing lease
        was taken over (each gets STATE_CONFLICT or LEASE_STALE).

        The lease rows stay locked (``FOR SHARE``) until this commit: a takeover
        waits for it, so no write of an old term lands after a new term began.
        """
        batch = self._expecting(txn, batch)
        fenced = [r for r in batch if isinstance(r, FencedAppend | FencedExpectingAppend)]
        if not fenced:
            return batch
        names_ = sorted({r.fence.name for r in fenced})
        current = dict(txn.conn.execute(FENCES, (names_,)).fetchall())
        stale = []
        for request in fenced:
            fence = request.fence
            if current.get(fence.name) != fence.epoch:
                request.error = PalyraError(
                    f"the lease on {fence.name} of epoch {fence.epoch} was taken over "
                    f"(now epoch {current.get(fence.name)}): this daemon no longer owns it",
                    code=ErrorCode.LEASE_STALE,
                    details={"lease": fence.name, "epoch": str(fence.epoch)},
                )
                stale.append(request)
        return [r for r in batch if r not in stale] if stale else batch

    def _expecting(self, txn: PgTxn, batch: list[Append]) -> list[Append]:
        """``batch`` less the appends whose expected rows changed (each gets STATE_CONFLICT).

        Read after the head row is locked: every commit of every daemon waits for that
        lock, so the rows read are the ones this commit writes over.
        """
        rows = expected_rows(batch)
        if not rows:
            return batch
        # A deadline is judged on the database's clock read here, in this transaction
        # with the head row locked (``clock_timestamp()``, not ``now()``, which is when
        # the transaction began, maybe long before the lock): sent with the rows' read,
        # in its round trip.
        clock = txn.conn.execute(CLOCK) if has_deadline(batch) else None
        stored: dict[tuple[str, str], bytes | None] = {}
        for table in {table for table, _key in rows}:
            keys = [key.encode() for t, key in rows if t == table]
            for key, value in txn.conn.execute(ROWS, (keys, table), binary=True):
                stored[(table, bytes(key).decode())] = bytes(value)
        now_ms = None
        if clock is not None:
            (now_ms,) = clock.fetchone() or (None,)
        failed = unmet(batch, stored, now_ms)
        return [r for r in batch if r not in failed] if failed else batch

    def _heads(self, txn: PgTxn, head: tuple[int, bytes], batch: list[Append]) -> Heads:
        """The chain heads ``batch`` appends to, as the database has them now."""
        env = self._env
        sessions: dict[str, bytes] = {}
        tape_next: dict[str, int] = {}
        for request in batch:
            for event in request.events:
                session_id, run_id = event.session_id, event.run_id
                if session_id not in sessions:
                    sessions[session_id] = self._session_head(txn, session_id)
                if event.tape and run_id not in tape_next:
                    seq = self._tape_next.get(run_id, -1)
                    if seq < 0:
                        seq = last_in_scope(txn.conn, env.dbs[names.TAPE], run_id)[0] + 1
                    tape_next[run_id] = seq
        tree = self._tree
        if tree is None:  # the shared tree as the database holds it now
            tree = self._stored_frontier(txn)
        return Heads(head[0], head[1], sessions, tape_next, tree)

    def _stored_frontier(self, txn: PgTxn) -> Frontier:
        """The shared tree's frontier as the database holds it now: the last one this
        thread committed with the leaves stored since folded in (one range read of the
        other daemons' leaves), else read whole (a read per perfect subtree, each
        rebuilt from up to a tile of rows: most of a commit's time where daemons commit
        in turn)."""
        stored = StoredTree(txn, self._env.dbs[names.TLOG])
        before = self._tree_before
        if before is not None and 0 <= stored.size - before.size <= _FOLD_AT_MOST:
            try:
                leaves = stored.entries(before.size, stored.size)
            except LookupError:  # not all stored: read it whole, which says what is wrong
                return stored.frontier()
            roots = list(before.roots)
            fold(roots, before.size, leaves, stored.prefix)
            return Frontier(stored.size, tuple(roots))
        return stored.frontier()

    def _session_head(self, txn: PgTxn, session_id: str) -> bytes:
        """The hash of the session's last record (remembered, else as the database has it)."""
        known = self._session_heads.get(session_id)
        if known is None:
            env = self._env
            last, raw = last_in_scope(txn.conn, env.dbs[names.BY_SESSION], session_id,
                                      env.dbs[names.EVENTS])  # fmt: skip
            if last < 0:
                return GENESIS
            if raw is None:
                raise PalyraError(f"an index points at missing record {last}")
            known = record_hashes(raw)[0]
        return known

    def _first_clash(self, plan: CommitPlan, live: list[Append], taken: set[bytes]
                     ) -> Append | None:
        """The first request whose event id is ``taken`` or twice in the plan (it gets
        its error), else None."""
        keys = [key for key, _position in plan.claims]
        if taken.isdisjoint(keys) and len(set(keys)) == len(keys):
            return None
        return blame(plan, live, taken.__contains__)

    # --- checkpoints --------------------------------------------------------

    def _commit_checkpoint(self, request: Checkpoint) -> None:
        """Sign the head as the database has it, inside the transaction that stores it."""
        signed: list[Any] = []

        def write(
            txn: PgTxn, head: tuple[int, bytes]
        ) -> tuple[None, list[Op], int, bytes]:
            position, chain = head[0] - 1, head[1]
            ts_ms = time.time_ns() // 1_000_000
            signature = request.signer.sign(checkpoint_message(position, chain, ts_ms))
            record = CheckpointRecord(RECORD_VERSION, position, chain, ts_ms,
                                      request.signer.public_key, signature)  # fmt: skip
            signed.append((position, chain, ts_ms, signature))
            op: Op = (names.CHECKPOINTS, u64_key(position) + u64_key(ts_ms),
                      encode_record(record))  # fmt: skip
            return None, [op], head[0], head[1]

        try:
            self._in_transaction(write)
        except Exception as exc:
            self._forget()
            fail([request], exc)
            return
        position, chain, ts_ms, signature = signed[-1]
        request.result = SignedCheckpoint(position, chain.hex(), ts_ms,
                                          request.signer.public_key.hex(), signature.hex())
        self.stats.commits += 1
        resolve([request])

    def _commit_tree_sign(self, request: TreeSign) -> None:
        """Sign the shared tree as the database has it (or store cosignatures), inside
        the transaction holding the head row: two daemons never sign inconsistent
        checkpoints, since each extends the one stored (``next_checkpoint`` refuses a fork)."""
        answer: list[bytes] = []

        def write(txn: PgTxn, head: tuple[int, bytes]) -> tuple[None, list[Op], int, bytes]:
            env, key = self._env, StoredTree.key_of()
            stored = txn.get(key, env.dbs[names.TLOG_CHECKPOINTS])
            tree = StoredTree(txn, env.dbs[names.TLOG])
            note = note_to_store(request, stored, tree.frontier(), tree.hash_at)
            if note is None:  # the tree has not grown: the stored note stands
                assert stored is not None
                answer.append(stored)
                return None, [], head[0], head[1]
            answer.append(note)
            return None, [(names.TLOG_CHECKPOINTS, key, note)], head[0], head[1]

        try:
            self._in_transaction(write)
        except (PalyraError, NoteError) as exc:  # a refusal: the caller's error as it is
            request.error = exc if isinstance(exc, PalyraError) else InvalidArgument(str(exc))
            resolve([request])
            return
        except Exception as exc:
            self._forget()
            fail([request], exc)
            return
        request.result = answer[-1]  # a retried transaction's, if it ran again
        resolve([request])

    # --- retention -------------------------------------------------------------

    def _commit_prune(self, request: Prune) -> None:
        """Tombstones at the tail and their ``journal.pruned`` event at the head, one commit.

        The same rewrite as LMDB's (``retention.prune``), read and planned inside
        the transaction that holds the head row.
        """
        try:
            result, plan = self._in_transaction(lambda txn, head: self._pruned(txn, head, request))
        except Exception as exc:
            self._forget()
            fail([request], exc)
            return
        request.result = result
        if plan is None:
            resolve([request])
            return
        self.stats.commits += 1
        self.stats.appended_events += len(plan.views)
        deliveries = (self._on_commit(list(zip(plan.views, plan.sizes, strict=True)))
                      if self._followed() else None)  # fmt: skip
        resolve([request], deliveries)
        _remember(self._session_heads, plan.sessions)
        self._tree = plan.tree

    def _pruned(
        self, txn: PgTxn, head: tuple[int, bytes], request: Prune
    ) -> tuple[tuple[PruneResult, CommitPlan | None], list[Op], int, bytes]:
        env, order = self._env, request.order
        watermark = pruned_through(env, txn)
        writes = PgWriteTxn(txn.conn)
        done = tombstone_prefix(env, writes, watermark, head[0] - 1, order)
        if done is None:
            raw = txn.get(u64_key(watermark), env.dbs[names.EVENTS]) if watermark else None
            at = record_hashes(raw)[1] if raw is not None else GENESIS
            return (PruneResult(0, watermark, 0, 0, 0, at.hex()), None), [], head[0], head[1]
        base = self._heads(txn, head, [])
        heads = Heads(base.next_position, base.head,
                      {RETENTION_SESSION: self._session_head(txn, RETENTION_SESSION)}, {}, base.tree)
        result, plan = pruned_event_plan(request, done, heads, env.config)
        return (result, plan), writes.ops + plan.ops, plan.next_position, plan.head

    # --- the transaction -----------------------------------------------------

    def _in_transaction(
        self, body: Callable[[PgTxn, tuple[int, bytes]], tuple[Any, list[Op], int, bytes]],
        committed: Callable[[Any], None] | None = None,
        taken_of: tuple[list[bytes], set[bytes]] | None = None,
    ) -> Any:
        """Lock the head, run ``body``, write its ops and the new head, commit.

        ``taken_of``: ``(event ids, taken)``; which of those ids the journal holds is
        asked right after the lock, in its round trip, and added to ``taken`` before
        ``body`` runs. The look-up runs once the lock is held, so it sees every commit
        before this one.

        ``body`` returns ``(result, ops, next_position, head)``; the commit is
        durable when this returns ``result``. ``committed(result)`` runs after the
        commit, before its positions are confirmed as this daemon's. A transaction the
        database aborts for retry (``40001``) is run again, ``body`` included, up to
        ``SERIALIZATION_RETRIES`` times: nothing is answered before a ``COMMIT`` returns,
        so a retried request is acknowledged once.
        """
        attempt = 0
        while True:
            try:
                return self._attempt(body, committed, taken_of)
            except psycopg.errors.SerializationFailure:
                # Nothing of the aborted transaction applied and nobody was answered:
                # run it again on the head as it is now, planned afresh (the requests'
                # refusals of the aborted attempt are decided again too).
                self._forget()  # (``_attempt`` closed the connection: a new one)
                attempt += 1
                self.serialization_retries += 1
                if attempt > SERIALIZATION_RETRIES:
                    raise

    def _attempt(
        self, body: Callable[[PgTxn, tuple[int, bytes]], tuple[Any, list[Op], int, bytes]],
        committed: Callable[[Any], None] | None,
        taken_of: tuple[list[bytes], set[bytes]] | None,
    ) -> Any:
        """One run of :meth:`_in_transaction`'s transaction."""
        if self._conn.broken or self._conn.closed:  # a lost connection: a new one
            self._conn.close()
            self._conn = connect(self._env.config.dsn)
        if taken_of is not None:
            taken_of[1].clear()
        conn, own = self._conn, self._own
        try:
            # Pipeline mode: a statement is sent without waiting for the ones before
            # it, and a round trip is paid only where a result is read. ``BEGIN`` and
            # ``COMMIT`` are this method's own statements (the connection is in
            # autocommit mode; psycopg's ``transaction()`` would wait on each), so
            # ``BEGIN`` travels with the head row's lock, and every write, the head's
            # move and ``COMMIT`` travel together: 3 round trips for a steady commit
            # instead of 7. After an error the server skips the rest of the pipeline
            # up to its sync, so nothing after the failing statement applies.
            with conn.pipeline():
                conn.execute(BEGIN)
                head = lock_head(conn, taken_of)
                if head != self._known:
                    if self._known is not None:
                        self._contended = True  # another daemon committed since this thread
                    self._forget()  # another daemon committed: remembered heads may be stale
                else:
                    self._contended = False  # nobody else committed since this thread did
                result, ops, next_position, new_head = body(PgTxn(conn), head)
                if ops:
                    trim(conn, head[0], next_position)
                    # Other daemons' followers are notified when this commits.
                    write_and_move_head(conn, ops, next_position, new_head)
                    if own is not None and next_position > head[0]:
                        own.begin(head[0], next_position - 1)  # this daemon delivers these
                conn.execute(COMMIT)
            # Leaving the pipeline synced it: the commit is durable, or it raised.
        except BaseException:
            if own is not None:
                own.discard()
            # Every failed attempt ends on a new connection (the next one connects):
            # psycopg prepares a statement the ``prepare_threshold``-th time it runs
            # it, and counts one prepared inside a pipeline that failed before the
            # server reached it, so the old connection's next commit may fail
            # "prepared statement _pg3_N does not exist". Closing also ends whatever
            # transaction the error left open. Failures are rare; a connection is cheap
            # beside a commit the writer could not make at all.
            conn.close()
            raise
        try:
            if committed is not None:
                committed(result)
        finally:
            if own is not None:
                own.confirm()
        self._known = (next_position, new_head)
        return result

    def _forget(self) -> None:
        self._known = None
        self._session_heads.clear()
        self._tape_next.clear()
        if self._tree is not None:
            self._tree_before = self._tree
        self._tree = None


def _weight(item: object) -> int:
    return len(item.events) if isinstance(item, Append) else 1


def _remember(memory: dict[Any, Any], committed: dict[Any, Any]) -> None:
    # Called only after a durable commit: memory never holds uncommitted values.
    if len(memory) + len(committed) > _MEMORY_LIMIT:
        memory.clear()
    memory.update(committed)
