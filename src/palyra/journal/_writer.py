"""The single writer thread: group commit of queued appends, one record per session.

Callers enqueue a request and await a future. The writer blocks for the first
request, then takes whatever else is already queued (it never waits for a
batch to fill, so a lone caller pays only its own sync), applies all of them
in one LMDB write transaction, makes it durable and only then resolves the
futures. With the commit log (``_durable``) the durable commit is the batch's
frame; LMDB takes the batch in a child of an open write transaction that
commits for many frames at once (``_commit_open``).

Within a commit, the events of each session become one record (see
``_layout``): the chain hashes, the record encoding and the index puts are
paid per record, not per event. A request whose event id is taken fails
alone: the transaction is aborted and redone without it. A lone one-event
append (the usual case at one appender) takes a short path to the same frame
(``Writer._commit_lone``): no batch state, its writes recorded as built.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import lmdb
from msgspec import Raw

from palyra.core.chain import (
    GENESIS,
    checkpoint_message,
    record_body,
    record_head_of,
    text_bytes,
)
from palyra.core.errors import AlreadyExists, ErrorCode, PalyraError, PalyraInternalError
from palyra.journal import _env as names
from palyra.journal._commitlog import Op
from palyra.journal._durable import RecordingTxn, Unsettled
from palyra.journal._env import JournalEnv
from palyra.journal._follow import Deliveries, deliver
from palyra.journal._prepare import PreparedEvent, prepare
from palyra.journal._prune import (
    PRUNED_ACTOR,
    PRUNED_KIND,
    RETENTION_SESSION,
    PruneOrder,
    PruneResult,
    tombstone_prefix,
)
from palyra.journal._reads import last_scoped_number, load_head, pruned_through, record_hash_at
from palyra.journal._record import (
    RECORD_VERSION,
    CheckpointRecord,
    build_record,
    encode_record,
    record_hashes,
    scoped_prefix,
    u64_key,
)
from palyra.journal._signing import Signer
from palyra.journal._timings import CommitTimings
from palyra.journal._types import NO_TAPE_SEQ, Checkpoint, EventDraft, StoredEvent

MAX_RECORD_EVENTS = 1024
MAX_RECORD_PAYLOAD_BYTES = 1 << 20
"""A record stops growing past either bound, so reading one event never decodes much more."""

# A follower's buffer counts an event as its payload plus this much for the rest.
_EVENT_OVERHEAD = 128

# Session chain heads and next tape seqs are remembered across commits (this
# thread is the only writer), so a lone appender's commit reads neither back
# from LMDB. Past this many entries a memory is dropped and refilled on demand.
_MEMORY_LIMIT = 4096


class Request:
    """One ``append`` call (``events``), one checkpoint (``signer``) or one prune batch.

    The writer fills in ``result`` (an append's ``StoredEvent`` list, a
    ``Checkpoint``, a ``PruneResult``) or ``error`` before answering it.
    """

    __slots__ = ("error", "events", "future", "loop", "prune", "result", "signer")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[Any],
        events: list[PreparedEvent] | None = None,
        signer: Signer | None = None,
        prune: PruneOrder | None = None,
    ) -> None:
        self.loop = loop
        self.future = future
        self.events: list[PreparedEvent] = events if events is not None else []
        self.signer = signer
        self.prune = prune
        self.result: Any = None
        self.error: BaseException | None = None

    @property
    def is_append(self) -> bool:
        """True for an ``append`` call."""
        return self.signer is None and self.prune is None


_Chunk = list[tuple[Request, PreparedEvent]]


@dataclass(slots=True)
class _BatchState:
    next_position: int
    head: bytes
    pruned_through: int = 0
    session_heads: dict[str, bytes] = field(default_factory=dict)
    tape_next: dict[str, int] = field(default_factory=dict)
    # What followers get after the commit: the events built, in position order,
    # and the records' chunks they came from (their sizes, only if anyone follows).
    committed: list[StoredEvent] = field(default_factory=list)
    sources: list[_Chunk] = field(default_factory=list)
    records: int = 0
    record_bytes: int = 0
    appends: int = 0
    entity_requests: list[Request] = field(default_factory=list)
    # Event id claims (id -> position) of the records laid out, in position order (claim_ids).
    claims: list[tuple[bytes, bytes]] = field(default_factory=list)
    # Index and record puts of this batch's records, written together (flush_puts).
    puts: dict[str, list[tuple[bytes, bytes]]] = field(
        default_factory=lambda: {names.EVENTS: [], names.BY_SESSION: [], names.TAPE: []}
    )
    # With the commit log: the transaction whose frame is durable, to commit to
    # LMDB once its callers have been answered (see Writer._commit).
    unapplied: Any = None


class _Clash(Exception):
    """An event id of ``request`` is already taken; the batch is redone without it."""

    def __init__(self, request: Request, error: AlreadyExists) -> None:
        super().__init__(error.message)
        self.request = request
        self.error = error


_U64 = struct.Struct(">Q")


@dataclass(slots=True)
class WriterStats:
    """Mutable counters, read by :meth:`JournalStore.stats`."""

    commits: int = 0
    appended_events: int = 0
    appended_bytes: int = 0
    append_calls: int = 0
    max_batch_calls: int = 0
    records: int = 0
    lone_commits: int = 0  # commits that took Writer._commit_lone
    timings: CommitTimings = field(default_factory=CommitTimings)


_STOP = object()
_APPLY = object()  # a reader of this process waits for LMDB to hold what was answered

# With the commit log, a commit's writes go to LMDB inside one long write
# transaction (each batch a child of it, so a failed batch aborts alone) that
# commits every this many frames, before a sync point, when a reader waits, or
# once no request came for _APPLY_IDLE_S: one LMDB commit and one set of
# page writes for many frames, instead of one per frame.
_APPLY_EVERY_FRAMES = 256
# Answered frames wait for the open transaction until this many of their writes
# are pending (or it commits), so their puts go in one LMDB call per table.
_APPLY_EVERY_OPS = 256
_APPLY_IDLE_S = 0.0005


class Writer:
    """Owns every LMDB write transaction of one store."""

    def __init__(
        self,
        env: JournalEnv,
        max_batch_events: int,
        on_commit: Callable[[list[tuple[StoredEvent, int]]], Deliveries],
        on_rows: Callable[[set[tuple[str, str]]], None] = lambda rows: None,
        followed: Callable[[], bool] = lambda: True,
    ):
        self._env = env
        self._max_batch = max(1, max_batch_events)
        self._on_commit = on_commit
        self._on_rows = on_rows
        self._followed = followed
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        # Queue a request; the writer resolves its future after the durable
        # commit (the queue's own put: no call around it on the caller's path).
        self.submit: Callable[[Request], None] = self._queue.put
        with env.read() as txn:
            count, head = load_head(env, txn)
            self.pruned_through = pruned_through(env, txn)
        self.next_position = count + 1
        self.head = head
        self._session_heads: dict[str, bytes] = {}
        self._tape_next: dict[str, int] = {}
        # A session's or run's index key prefix and hashed text, kept between records.
        self._scopes: dict[str, tuple[bytes, bytes]] = {}
        # The write transaction durable frames were applied to, not yet committed.
        self._open: Any = None
        self._open_frames = 0
        # Frames answered but not yet put into the open transaction (_finish),
        # their op count, and the event ids they claim (an id check sees them).
        self._answered: list[RecordingTxn] = []
        self._answered_ops = 0
        self._answered_ids: set[bytes] = set()
        env.on_wait = self._wanted
        self.stats = WriterStats()
        self._thread = threading.Thread(target=self._run, name=names.WRITER_THREAD, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Finish every queued request, then end the thread."""
        self._queue.put(_STOP)
        self._thread.join()

    def _wanted(self) -> None:
        # A reader (another thread) waits for LMDB to hold the answered frames.
        self._queue.put(_APPLY)

    def _run(self) -> None:
        try:
            self._serve()
        finally:
            self._commit_open()

    def _serve(self) -> None:
        stopping = False
        queue_empty, queue_take = self._queue.empty, self._queue.get_nowait
        while not stopping:
            if self._open is None:
                first = self._queue.get()
            else:
                try:
                    first = self._queue.get(timeout=_APPLY_IDLE_S)
                except queue.Empty:
                    self._commit_open()  # idle: let LMDB hold what was answered
                    continue
            if first is _STOP:
                return
            if first is _APPLY:
                self._commit_open()
                continue
            assert isinstance(first, Request)
            batch = [first]
            size = len(first.events) or 1
            # Only this thread takes from the queue: when it is not empty,
            # get_nowait cannot fail (a lone caller costs no queue.Empty raised).
            # At 256 appenders this loop runs for every append: bound methods and
            # a request tested first (markers are rare).
            empty, take, limit, add = queue_empty, queue_take, self._max_batch, batch.append
            while size < limit and not empty():
                item = take()
                if isinstance(item, Request):
                    add(item)
                    size += len(item.events) or 1
                elif item is _STOP:
                    stopping = True
                    break
                else:
                    assert item is _APPLY
                    self._commit_open()
            self._finish()
            self._commit(batch)

    def _commit(self, batch: list[Request]) -> None:
        began = time.perf_counter()
        if len(batch) == 1:
            request = batch[0]
            if (
                len(request.events) == 1
                and self._env.durable is not None
                and request.signer is None
                and request.prune is None
                and self._commit_lone(request, request.events[0])
            ):
                self._timed(began, 1)
                return
        live = batch
        env = self._env
        try:
            while True:
                try:
                    state = self._apply(live)
                    break
                except lmdb.MapFullError:
                    self._commit_open()  # a resize needs no transaction open
                    env.grow()  # no ceiling: double the map and redo the batch
                except Unsettled:
                    # LMDB must hold every earlier frame first: commit, then redo.
                    self._commit_open()
                except _Clash as clash:
                    clash.request.error = clash.error
                    live = [r for r in live if r is not clash.request]
        except Exception as exc:
            error = PalyraError(f"journal commit failed: {exc}", code=ErrorCode.UNAVAILABLE)
            error.__cause__ = exc
            self.stats.timings.failures += 1
            self.stats.timings.last_failure = str(exc)
            for request in batch:
                request.error = error
            _resolve(batch)
            return
        rows = {
            (w.table, w.key)
            for r in state.entity_requests for e in r.events for w in e.entity_writes
        }
        if rows:
            self._on_rows(rows)  # before anyone hears of the commit: no stale read after
        stats = self.stats
        stats.commits += 1
        stats.append_calls += state.appends
        stats.max_batch_calls = max(stats.max_batch_calls, len(batch))
        stats.appended_events += len(state.committed)
        stats.appended_bytes += state.record_bytes
        stats.records += state.records
        self._timed(began, len(state.committed))
        # Followers first: once an append returns, its events are on their way
        # to every follower too (tests and callers may rely on that order).
        deliveries = (self._on_commit(_follower_items(state))
                      if state.committed and self._followed() else None)
        _resolve(batch, deliveries)
        # This thread's own memory: after the answer, off the callers' path.
        self.next_position = state.next_position
        self.head = state.head
        self.pruned_through = state.pruned_through
        _remember(self._session_heads, state.session_heads)
        _remember(self._tape_next, state.tape_next)
        txn = state.unapplied
        if txn is not None:
            # The frame is the commit: the callers were answered the moment it
            # was durable. The open LMDB transaction takes the same writes
            # later (_finish), not now: their loop needs the GIL to wake up,
            # and this thread would hold it; and frames put together cost one
            # LMDB call per table, not one per write. Reads of this process
            # wait until LMDB commits them (JournalEnv.read, _commit_open).
            self._answered.append(txn)
            self._answered_ops += len(txn.ops)
            self._answered_ids.update(txn.claimed)
            if not txn.deferred:
                self._apply_answered()  # a child txn: commit it before the next begins

    def _timed(self, began: float, events: int) -> None:
        timings = self.stats.timings
        timings.commit_seconds.observe(time.perf_counter() - began)
        timings.batch_events.observe(events)
        timings.last_failure = ""

    def _commit_lone(self, request: Request, event: PreparedEvent) -> bool:
        """A lone one-event append: its frame built straight from the event; False if it can't.

        The same record, frame and answer as :meth:`_apply` makes for a batch
        of this one request, without the batch's bookkeeping. It takes the
        event only when everything it needs is at hand: the session's chain
        head and the run's next tape seq remembered, the event id free (a
        taken id fails in the batch path, which also names the clash), room
        in the map and the log without committing LMDB first. Otherwise it
        writes nothing and returns False, and the batch path takes the request.
        """
        session_id = event.session_id
        prev = self._session_heads.get(session_id)
        if prev is None:
            return False
        run_id = event.run_id
        seq = NO_TAPE_SEQ
        if event.tape:
            next_seq = self._tape_next.get(run_id)
            if next_seq is None:
                return False
            seq = next_seq
        env = self._env
        durable = env.durable
        assert durable is not None
        dbs = env.dbs
        open_txn = self._open
        if open_txn is None:
            open_txn = self._open = env.env.begin(write=True)
        id_key = event.event_id.encode()
        ids_db = dbs[names.EVENT_IDS]
        if id_key in self._answered_ids or open_txn.get(id_key, db=ids_db) is not None:
            return False
        request.result = None
        position = self.next_position
        pack = _U64.pack
        key = pack(position)
        # record_row, inline: RECORD_EVENT_FIELDS, the redactions, the payload.
        redactions = list(event.redactions)
        body = record_body([[
            event.event_id, run_id, seq, event.kind, event.actor, event.ts_ms,
            event.principal, event.device_id, event.channel, redactions, Raw(event.payload),
        ]])  # fmt: skip
        scopes = self._scopes
        session_prefix, session_text = scopes.get(session_id) or self._scope(session_id)
        value, digest, link = build_record(
            record_head_of(prev, position, 1, session_text), body, self.head, position
        )
        # The writes in the order the batch path records them (_claim_ids,
        # then _flush_puts per table, then the entity rows): the same frame.
        ops: list[Op] = [
            (names.EVENT_IDS, id_key, key),
            (names.EVENTS, key, value),
            (names.BY_SESSION, session_prefix + key, b""),
        ]
        if seq != NO_TAPE_SEQ:
            run_prefix = (scopes.get(run_id) or self._scope(run_id))[0]
            ops.append((names.TAPE, run_prefix + pack(seq), key))
        for write in event.entity_writes:
            ops.append((write.table, write.key.encode(), write.value))
        txn = RecordingTxn.recorded(open_txn, durable.names, ops, dbs, names.EVENTS)
        try:
            durable.log_frame(txn, settled=not self._unsettled())
        except (lmdb.MapFullError, Unsettled):
            return False  # nothing written: the batch path commits LMDB or grows the map
        except Exception as exc:
            error = PalyraError(f"journal commit failed: {exc}", code=ErrorCode.UNAVAILABLE)
            error.__cause__ = exc
            self.stats.timings.failures += 1
            self.stats.timings.last_failure = str(exc)
            request.error = error
            _resolve([request])
            return True
        # Durable. Reads of this process wait until LMDB holds it (see _apply).
        if env.visible.is_set():
            env.visible.clear()
        # This thread's own memory first: once the caller is woken, its loop
        # wants the GIL, and work left here would hold it up.
        self.next_position = position + 1
        self.head = link
        heads = self._session_heads
        if len(heads) >= _MEMORY_LIMIT:
            heads.clear()
        heads[session_id] = digest
        if seq != NO_TAPE_SEQ:
            tape_next = self._tape_next
            if len(tape_next) >= _MEMORY_LIMIT:
                tape_next.clear()
            tape_next[run_id] = seq + 1
        self._answered.append(txn)
        self._answered_ops += len(txn.ops)
        self._answered_ids.add(id_key)
        stats = self.stats
        stats.commits += 1
        stats.append_calls += 1
        stats.max_batch_calls = max(stats.max_batch_calls, 1)
        stats.appended_events += 1
        stats.appended_bytes += len(value)
        stats.records += 1
        stats.lone_commits += 1
        view = StoredEvent(
            position, event.event_id, session_id, run_id, seq, event.kind, event.actor,
            event.ts_ms, event.principal, event.device_id, event.channel, event.value,
            redactions, digest.hex(), prev.hex(), link.hex(), event.origin,
        )  # fmt: skip
        request.result = [view]
        if event.entity_writes:
            self._on_rows({(w.table, w.key) for w in event.entity_writes})
        if self._followed():
            deliveries = self._on_commit([(view, len(event.payload) + _EVENT_OVERHEAD)])
            _resolve([request], deliveries)
            return True
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
            request.loop.call_soon_threadsafe(_settle, [request])
        return True

    def _apply_answered(self) -> None:
        """Put the answered frames' writes into the open LMDB transaction."""
        answered = self._answered
        if not answered:
            return
        self._answered, self._answered_ops = [], 0
        self._answered_ids.clear()
        env = self._env
        assert env.durable is not None
        try:
            env.durable.apply(answered)
            self._open_frames += len(answered)
        except BaseException as exc:
            env.unapplied = exc  # reads refuse until a reopen replays the frames
            env.visible.set()

    def _unsettled(self) -> bool:
        """True while LMDB has not committed some answered frame."""
        return bool(self._open_frames or self._answered)

    def _finish(self) -> None:
        """Before the next batch: now and then apply the answered frames, commit LMDB, sync."""
        durable = self._env.durable
        if durable is None:
            return
        if self._answered_ops >= _APPLY_EVERY_OPS:
            self._apply_answered()
        if self._open is not None and (
            self._open_frames + len(self._answered) >= _APPLY_EVERY_FRAMES
            or durable.sync_due()
        ):
            self._commit_open()
        if self._open is None:
            try:
                durable.after_commit()  # now and then: flush LMDB, restart the log
            except Exception as exc:  # a failed flush: refuse commits until reopened
                durable.broken = exc

    def _commit_open(self) -> None:
        """Commit the open LMDB transaction (the frames it holds are durable already)."""
        self._apply_answered()
        txn, self._open = self._open, None
        if txn is None:
            return
        frames, self._open_frames = self._open_frames, 0
        env = self._env
        try:
            if frames and env.durable is not None:
                env.durable.commit_open(txn)
            else:
                txn.abort()
        except BaseException as exc:
            env.unapplied = exc  # reads refuse until a reopen replays the frames
        finally:
            env.visible.set()

    def _apply(self, batch: list[Request]) -> _BatchState:
        state = _BatchState(self.next_position, self.head, self.pruned_through)
        appends = [r for r in batch if r.signer is None and r.prune is None]
        others: list[Request] = []  # prunes and checkpoints, usually none
        if len(appends) < len(batch):
            others = [r for r in batch if r.signer is not None or r.prune is not None]
        state.appends = len(appends)
        chunks, entity_requests = _layout(appends)
        state.entity_requests = entity_requests
        env = self._env
        durable = env.durable
        raw: Any = None
        if durable is None:
            raw = env.env.begin(write=True)
            txn: Any = raw
        else:
            if self._open is None:
                self._open = env.env.begin(write=True)
            # With the commit log, the txn records its writes: they become the
            # frame. A batch of appends only (no prune or checkpoint: nothing
            # reads back its own writes) writes nothing to LMDB before its frame:
            # its writes go into the open transaction once the frame is durable
            # and the callers are answered (RecordingTxn.deferred). A prune or
            # checkpoint batch writes into a child of it, aborted alone on failure.
            if others:
                self._apply_answered()  # a prune reads what came before; no child open yet
                raw = env.env.begin(write=True, parent=self._open)
                txn = RecordingTxn(raw, durable.names)
            else:
                txn = RecordingTxn(self._open, durable.names, deferred=True)
        try:
            for chunk in chunks:
                self._put_record(txn, state, chunk)
            self._claim_ids(txn, state, chunks)  # before any record is put: a clash redoes
            self._flush_puts(txn, state)
            # Entity rows in arrival order: the last request queued writes last.
            dbs = env.dbs
            for request in entity_requests:
                for event in request.events:
                    for write in event.entity_writes:
                        if write.value is None:
                            txn.delete(write.key.encode(), db=dbs[write.table])
                        else:
                            txn.put(write.key.encode(), write.value, db=dbs[write.table])
            # Prune batches: tombstones at the tail, their journal.pruned event at the head.
            for request in others:
                if request.prune is not None:
                    request.result = self._prune(txn, state, request)
            # Checkpoints sign the head after every record of the batch.
            for request in others:
                if request.signer is not None:
                    request.result = self._checkpoint(txn, state, request.signer)
            if durable is None:
                raw.commit()
            else:
                # One flush: the frame is the commit point.
                durable.log_frame(txn, settled=not self._unsettled())
                # From here until LMDB holds this txn, reads of this process wait.
                # Cleared after the frame, not before: a read while the frame is
                # being flushed sees the state before it, which nobody has been
                # told is gone (callers, followers and the entity cache hear of
                # the commit only below, and the cache files a row under the
                # version noted before its read, which the bump then outdates).
                # So reads stall only for LMDB's own commit, not for the flush.
                if env.visible.is_set():  # a lone caller's frames find it down already
                    env.visible.clear()
                state.unapplied = txn
        except BaseException:
            if raw is not None:  # a deferred txn wrote nothing to the open one
                with contextlib.suppress(lmdb.Error):
                    raw.abort()
            if not self._unsettled():
                env.visible.set()  # no answered frame waits for LMDB
            raise
        return state

    def _claim_ids(self, txn: Any, state: _BatchState, chunks: list[_Chunk]) -> None:
        # put without overwrite doubles as the duplicate check; the claims are
        # those _put_record collected for ``chunks`` (id -> the position the
        # record gave the event). All ids in one LMDB call; only on a clash are
        # they looked at one by one, to find whose it is.
        ids = self._env.dbs[names.EVENT_IDS]
        items = state.claims
        if not items:
            return
        state.claims = []
        if isinstance(txn, RecordingTxn):
            if txn.put_new(items, db=ids, taken=self._answered_ids):
                return
        else:
            _consumed, added = txn.cursor(db=ids).putmulti(items, overwrite=False)
            if added == len(items):
                return
        # Someone's id was taken (by an earlier commit, or earlier in this batch):
        # the first item whose stored position is not its own is the clash (a
        # deferred txn put none of them: an id seen earlier in the batch clashes).
        flat = [pair for chunk in chunks for pair in chunk]
        deferred = isinstance(txn, RecordingTxn) and txn.deferred
        seen: set[bytes] = set()
        for (request, event), (key, value) in zip(flat, items, strict=True):
            if deferred:
                taken = (key in seen or key in self._answered_ids
                         or txn.get(key, db=ids) is not None)
                seen.add(key)
            else:
                taken = txn.get(key, db=ids) != value
            if taken:
                raise _Clash(
                    request,
                    AlreadyExists(
                        f"event_id {event.event_id} already exists",
                        details={"event_id": event.event_id},
                    ),
                )
        raise PalyraInternalError("an event id clashed, but none is taken")

    def _put_record(self, txn: Any, state: _BatchState, chunk: _Chunk) -> None:
        first = state.next_position
        count = len(chunk)
        last = first + count - 1
        session_id = chunk[0][1].session_id
        prev = self._session_head(txn, state, session_id)
        rows: list[list[Any]] = []
        add_row = rows.append
        add_claim = state.claims.append
        pack = _U64.pack
        tape_last: dict[str, int] = {}
        tape_next = state.tape_next
        position = first
        for _request, event in chunk:
            add_claim((event.event_id.encode(), pack(position)))
            position += 1
            if event.tape:
                run_id = event.run_id
                seq = tape_next.get(run_id)
                if seq is None:
                    seq = self._next_tape_seq(txn, state, run_id)
                tape_next[run_id] = seq + 1
                tape_last[run_id] = seq
            else:
                seq = NO_TAPE_SEQ
            # record_row, inline: RECORD_EVENT_FIELDS, the redactions, the payload.
            add_row([
                event.event_id, event.run_id, seq, event.kind, event.actor, event.ts_ms,
                event.principal, event.device_id, event.channel, list(event.redactions),
                Raw(event.payload),
            ])  # fmt: skip
        scopes = self._scopes
        session_prefix, session_text = scopes.get(session_id) or self._scope(session_id)
        head = record_head_of(prev, first, count, session_text)
        value, digest, link = build_record(head, record_body(rows), state.head, last)
        last_key = pack(last)
        puts = state.puts
        puts[names.EVENTS].append((last_key, value))
        puts[names.BY_SESSION].append((session_prefix + last_key, b""))  # scoped_key
        if tape_last:
            tape = puts[names.TAPE]
            for run_id, seq in tape_last.items():
                run_prefix = (scopes.get(run_id) or self._scope(run_id))[0]
                tape.append((run_prefix + pack(seq), last_key))
        digest_hex, prev_hex, link_hex = digest.hex(), prev.hex(), link.hex()
        add_view = state.committed.append
        position = first
        for (request, event), row in zip(chunk, rows, strict=True):
            # The row's redaction list is the view's too: the row is encoded
            # already and dropped, so the list has one owner from here on.
            view = StoredEvent(
                position, event.event_id, session_id, event.run_id, row[2], event.kind,
                event.actor, event.ts_ms, event.principal, event.device_id, event.channel,
                event.value, row[9], digest_hex, prev_hex, link_hex, event.origin,
            )  # fmt: skip
            position += 1
            result = request.result
            if result is None:
                request.result = [view]
            else:
                result.append(view)
            add_view(view)
        state.sources.append(chunk)
        state.session_heads[session_id] = digest
        state.head = link
        state.next_position = last + 1
        state.records += 1
        state.record_bytes += len(value)

    def _scope(self, scope: str) -> tuple[bytes, bytes]:
        """``(scoped_prefix(scope), text_bytes(scope))``, remembered (bounded)."""
        if len(self._scopes) >= _MEMORY_LIMIT:
            self._scopes.clear()
        pair = self._scopes[scope] = (scoped_prefix(scope), text_bytes(scope))
        return pair

    def _flush_puts(self, txn: Any, state: _BatchState) -> None:
        # One LMDB call per table for all records laid out since the last flush
        # (positions grow, so the records append). Reads of these tables in
        # this txn (prune, a session's or run's head) come after a flush.
        dbs = self._env.dbs
        puts = state.puts
        for name, items in puts.items():
            if not items:
                continue
            append = name == names.EVENTS
            if not isinstance(txn, RecordingTxn):
                txn.cursor(db=dbs[name]).putmulti(items, append=append)
            else:
                txn.put_many(items, db=dbs[name], append=append)
                if txn.deferred:
                    puts[name] = []  # the txn keeps the list until it is applied
                    continue
            items.clear()

    def _session_head(self, txn: Any, state: _BatchState, session_id: str) -> bytes:
        head = state.session_heads.get(session_id)
        if head is None:
            head = self._session_heads.get(session_id)
        if head is None:
            # The session's last record, found through its index: no chain-head
            # table to write on every commit (one page fewer per flush).
            self._apply_answered()  # LMDB must hold the answered frames' records
            last = last_scoped_number(txn, self._env.dbs[names.BY_SESSION], session_id)
            head = GENESIS if last < 0 else record_hash_at(txn, self._env, last)
        return head

    def _next_tape_seq(self, txn: Any, state: _BatchState, run_id: str) -> int:
        seq = state.tape_next.get(run_id)
        if seq is None:
            seq = self._tape_next.get(run_id)
        if seq is None:
            self._apply_answered()  # LMDB must hold the answered frames' tape keys
            seq = last_scoped_number(txn, self._env.dbs[names.TAPE], run_id) + 1
        return seq

    def _prune(self, txn: Any, state: _BatchState, request: Request) -> PruneResult:
        order = request.prune
        assert order is not None
        watermark = state.pruned_through
        done = tombstone_prefix(self._env, txn, watermark, state.next_position - 1, order)
        if done is None:
            raw = txn.get(u64_key(watermark), db=self._env.dbs[names.EVENTS]) if watermark else None
            at = record_hashes(raw)[1] if raw is not None else GENESIS
            return PruneResult(0, watermark, 0, 0, 0, at.hex())
        state.pruned_through = done.last
        events = done.last - done.first + 1
        [event] = prepare([EventDraft(
            kind=PRUNED_KIND, actor=PRUNED_ACTOR, session_id=RETENTION_SESSION,
            payload={"first": done.first, "through": done.last, "records": done.records,
                     "events": events, "bytes_freed": done.bytes_freed,
                     "head_hash": done.global_hash.hex(), "before_ms": order.before_ms})],
            self._env.config)
        position = state.next_position
        request.result = None  # a redone batch may have left its last attempt's result
        self._put_record(txn, state, [(request, event)])
        [(key, value)] = state.claims
        state.claims = []
        if not txn.put(key, value, db=self._env.dbs[names.EVENT_IDS], overwrite=False):
            raise PalyraInternalError(f"fresh event id {event.event_id} is already taken")
        self._flush_puts(txn, state)
        return PruneResult(done.first, done.last, done.records, events, done.bytes_freed,
                           done.global_hash.hex(), position)

    def _checkpoint(self, txn: Any, state: _BatchState, signer: Signer) -> Checkpoint:
        position = state.next_position - 1
        ts_ms = time.time_ns() // 1_000_000
        signature = signer.sign(checkpoint_message(position, state.head, ts_ms))
        record = CheckpointRecord(
            RECORD_VERSION, position, state.head, ts_ms, signer.public_key, signature
        )
        key = u64_key(position) + u64_key(ts_ms)
        txn.put(key, encode_record(record), db=self._env.dbs[names.CHECKPOINTS])
        return Checkpoint(
            position, state.head.hex(), ts_ms, signer.public_key.hex(), signature.hex()
        )


def _layout(appends: list[Request]) -> tuple[list[_Chunk], list[Request]]:
    """The records of one commit, in position order, and the requests with entity writes.

    The events of every request whose events share one session join that
    session's record, in arrival order (concurrent requests have no order
    among themselves, so gathering a session's events moves nothing a caller
    can rely on); a request spanning sessions keeps its order and gets one
    record per run of same-session events. A record is cut after
    ``MAX_RECORD_EVENTS`` events or ``MAX_RECORD_PAYLOAD_BYTES`` of payload;
    a request's events stay at consecutive positions either way.
    """
    groups: list[_Chunk] = []
    by_session: dict[str, _Chunk] = {}
    with_writes: list[Request] = []
    # A group of at most MAX_RECORD_EVENTS events whose payloads are all at most
    # this big cannot reach the payload bound: it is one record, bytes uncounted.
    small = MAX_RECORD_PAYLOAD_BYTES // MAX_RECORD_EVENTS
    all_small = True
    for request in appends:
        request.result = None  # a redone batch starts over
        events = request.events
        if len(events) == 1:  # the usual call: one event, one session
            event = events[0]
            group = by_session.get(event.session_id)
            if group is None:
                group = by_session[event.session_id] = []
                groups.append(group)
            group.append((request, event))
            if event.entity_writes:
                with_writes.append(request)
            if len(event.payload) > small:
                all_small = False
            continue
        all_small = False  # several events: count them below
        if any(event.entity_writes for event in events):
            with_writes.append(request)
        session_id = events[0].session_id
        if all(event.session_id == session_id for event in events):
            group = by_session.get(session_id)
            if group is None:
                group = by_session[session_id] = []
                groups.append(group)
            group.extend((request, event) for event in events)
            continue
        run: _Chunk = []
        for event in events:
            if run and event.session_id != run[-1][1].session_id:
                groups.append(run)
                run = []
            run.append((request, event))
        groups.append(run)
    chunks: list[_Chunk] = []
    for group in groups:
        if len(group) <= MAX_RECORD_EVENTS and (
            all_small or all(len(item[1].payload) <= small for item in group)
        ):
            chunks.append(group)  # cannot reach either bound: one record
            continue
        chunk: _Chunk = []
        size = 0
        for item in group:
            if chunk and (len(chunk) >= MAX_RECORD_EVENTS or size >= MAX_RECORD_PAYLOAD_BYTES):
                chunks.append(chunk)
                chunk, size = [], 0
            chunk.append(item)
            size += len(item[1].payload)
        chunks.append(chunk)
    return chunks, with_writes


def _follower_items(state: _BatchState) -> list[tuple[StoredEvent, int]]:
    """``(event, size)`` of every event committed, for the followers' bounded buffers.

    Built only when someone follows: a commit with no follower makes no pair.
    """
    events = (event for chunk in state.sources for _request, event in chunk)
    return [
        (view, len(event.payload) + _EVENT_OVERHEAD)
        for view, event in zip(state.committed, events, strict=True)
    ]


def _remember(memory: dict[Any, Any], committed: dict[Any, Any]) -> None:
    # Called only after a durable commit: memory never holds uncommitted values.
    if len(memory) + len(committed) > _MEMORY_LIMIT:
        memory.clear()
    memory.update(committed)


def _resolve(batch: list[Request], deliveries: Deliveries | None = None) -> None:
    # One wake-up per event loop per commit, not one per caller, and the same
    # one hands the commit's events to that loop's followers (first: once an
    # append returns, its events have reached every follower on its loop).
    loop = batch[0].loop
    if not deliveries and len(batch) == 1:  # a lone caller, nobody following
        try:
            loop.call_soon_threadsafe(_settle, batch)
        except RuntimeError:  # a closed loop: nobody is waiting any more
            return
        return
    by_loop = {loop: batch}
    for request in batch:
        if request.loop is not loop:  # callers on several loops: group them
            by_loop = {}
            for each in batch:
                by_loop.setdefault(each.loop, []).append(each)
            break
    for loop, requests in by_loop.items():
        items = deliveries.pop(loop, None) if deliveries else None
        # A closed loop raises RuntimeError: nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            if items:
                loop.call_soon_threadsafe(_deliver_and_settle, items, requests)
            else:
                loop.call_soon_threadsafe(_settle, requests)
    for loop, items in (deliveries or {}).items():  # followers on loops with no caller
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(deliver, items)


def _deliver_and_settle(items: list[Any], requests: list[Request]) -> None:
    deliver(items)
    _settle(requests)


def _settle(requests: list[Request]) -> None:
    for request in requests:
        future = request.future
        if future.done():
            continue  # caller was cancelled; the write is durable regardless
        if request.error is not None:
            future.set_exception(request.error)
        else:
            future.set_result(request.result)
