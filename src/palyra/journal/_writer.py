"""The single writer thread: group commit of queued appends.

Callers enqueue a request and await a future. The writer blocks for the first
request, then takes whatever else is already queued (it never waits for a
batch to fill, so a lone caller pays only its own sync), applies all of them
in one LMDB write transaction, commits with sync and only then resolves the
futures. A request that fails validation inside the transaction (duplicate
event id) fails alone: every check runs before the request's first put.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import lmdb
import msgspec

from palyra.core.chain import GENESIS, checkpoint_message, event_hash, link_hash
from palyra.core.errors import AlreadyExists, ErrorCode, PalyraError
from palyra.core.event_header import header_values
from palyra.journal import _env as names
from palyra.journal._env import JournalEnv
from palyra.journal._prepare import PreparedEvent
from palyra.journal._reads import last_scoped_number, load_head
from palyra.journal._record import (
    RECORD_VERSION,
    CheckpointRecord,
    EventRecord,
    encode_record,
    scoped_key,
    scoped_prefix,
    to_stored,
    u64_key,
)
from palyra.journal._signing import Signer
from palyra.journal._types import NO_TAPE_SEQ, Checkpoint, StoredEvent

# Session chain heads and next tape seqs are remembered across commits (this
# thread is the only writer), so a lone appender's commit reads neither back
# from LMDB. Past this many entries a memory is dropped and refilled on demand.
_MEMORY_LIMIT = 4096


@dataclass(slots=True)
class Request:
    """One ``append`` call (``events``) or one checkpoint (``signer``)."""

    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    events: list[PreparedEvent] = field(default_factory=list)
    signer: Signer | None = None


@dataclass(slots=True)
class _BatchState:
    next_position: int
    head: bytes
    session_heads: dict[str, bytes] = field(default_factory=dict)
    tape_next: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class WriterStats:
    """Mutable counters, read by :meth:`JournalStore.stats`."""

    commits: int = 0
    appended_events: int = 0
    appended_bytes: int = 0
    append_calls: int = 0
    max_batch_calls: int = 0


_STOP = object()


class Writer:
    """Owns every LMDB write transaction of one store."""

    def __init__(self, env: JournalEnv, max_batch_events: int,
                 on_commit: Callable[[list[StoredEvent]], None]):
        self._env = env
        self._max_batch = max(1, max_batch_events)
        self._on_commit = on_commit
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        with env.read() as txn:
            count, head = load_head(env, txn)
        self.next_position = count + 1
        self.head = head
        self._session_heads: dict[str, bytes] = {}
        self._tape_next: dict[str, int] = {}
        self.stats = WriterStats()
        self._thread = threading.Thread(target=self._run, name="palyra-journal-writer", daemon=True)
        self._thread.start()

    def submit(self, request: Request) -> None:
        """Queue a request; the writer resolves its future after the durable commit."""
        self._queue.put(request)

    def stop(self) -> None:
        """Finish every queued request, then end the thread."""
        self._queue.put(_STOP)
        self._thread.join()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is _STOP:
                return
            assert isinstance(first, Request)
            batch = [first]
            size = len(first.events) or 1
            while size < self._max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stopping = True
                    break
                assert isinstance(item, Request)
                batch.append(item)
                size += len(item.events) or 1
            self._commit(batch)

    def _commit(self, batch: list[Request]) -> None:
        try:
            while True:
                try:
                    outcomes, state, written = self._apply(batch)
                    break
                except lmdb.MapFullError:
                    self._env.grow()  # no ceiling: double the map and redo the batch
        except Exception as exc:
            error = PalyraError(f"journal commit failed: {exc}", code=ErrorCode.UNAVAILABLE)
            error.__cause__ = exc
            _resolve(batch, [(None, error)] * len(batch))
            return
        self.next_position = state.next_position
        self.head = state.head
        _remember(self._session_heads, state.session_heads)
        _remember(self._tape_next, state.tape_next)
        stats = self.stats
        stats.commits += 1
        stats.append_calls += len(batch)
        stats.max_batch_calls = max(stats.max_batch_calls, len(batch))
        stats.appended_events += written[0]
        stats.appended_bytes += written[1]
        _resolve(batch, outcomes)
        # The committed events, already built: followers get them from memory.
        self._on_commit([event for result, error in outcomes if error is None
                         and isinstance(result, list) for event in result])

    def _apply(
        self, batch: list[Request]
    ) -> tuple[list[tuple[Any, BaseException | None]], _BatchState, tuple[int, int]]:
        state = _BatchState(self.next_position, self.head)
        outcomes: list[tuple[Any, BaseException | None]] = []
        written = [0, 0]
        txn = self._env.env.begin(write=True)
        try:
            for request in batch:
                try:
                    if request.signer is not None:
                        outcomes.append((self._checkpoint(txn, state, request.signer), None))
                    else:
                        result = self._append(txn, state, request.events, written)
                        outcomes.append((result, None))
                except PalyraError as exc:
                    outcomes.append((None, exc))
            # Chain heads are written once per session per batch, not per event.
            heads = self._env.dbs[names.SESSION_HEADS]
            for session_id, head in state.session_heads.items():
                txn.put(scoped_prefix(session_id), head, db=heads)
            txn.commit()
        except BaseException:
            txn.abort()
            raise
        return outcomes, state, (written[0], written[1])

    def _append(
        self, txn: Any, state: _BatchState, events: list[PreparedEvent], written: list[int]
    ) -> list[StoredEvent]:
        dbs = self._env.dbs
        # Claim every id first (put without overwrite doubles as the duplicate
        # check); on a clash undo this request's claims so it fails alone.
        claimed: list[bytes] = []
        for offset, event in enumerate(events):
            id_key = event.event_id.encode()
            position_key = u64_key(state.next_position + offset)
            if not txn.put(id_key, position_key, db=dbs[names.EVENT_IDS], overwrite=False):
                for key in claimed:
                    txn.delete(key, db=dbs[names.EVENT_IDS])
                raise AlreadyExists(
                    f"event_id {event.event_id} already exists",
                    details={"event_id": event.event_id},
                )
            claimed.append(id_key)
        stored: list[StoredEvent] = []
        for event in events:
            position = state.next_position
            prev = self._session_head(txn, state, event.session_id)
            tape_seq = self._next_tape_seq(txn, state, event.run_id) if event.tape else NO_TAPE_SEQ
            header = msgspec.structs.replace(event, position=position, tape_seq=tape_seq)
            digest = event_hash(prev, header, event.redactions, event.payload)
            link = link_hash(state.head, position, digest)
            record = EventRecord(
                *header_values(header),
                v=RECORD_VERSION,
                payload=event.payload,
                redactions=list(event.redactions),
                prev_hash=prev,
                hash=digest,
                global_hash=link,
            )
            raw = encode_record(record)
            pos_key = u64_key(position)
            txn.put(pos_key, raw, db=dbs[names.EVENTS], append=True)
            txn.put(scoped_key(event.session_id, position), b"", db=dbs[names.BY_SESSION])
            if event.tape:
                txn.put(scoped_key(event.run_id, tape_seq), pos_key, db=dbs[names.TAPE])
                state.tape_next[event.run_id] = tape_seq + 1
            for write in event.entity_writes:
                key = write.key.encode()
                if write.value is None:
                    txn.delete(key, db=dbs[write.table])
                else:
                    txn.put(key, write.value, db=dbs[write.table])
            state.session_heads[event.session_id] = digest
            state.head = link
            state.next_position = position + 1
            written[0] += 1
            written[1] += len(raw)
            stored.append(to_stored(record, event.value))
        return stored

    def _session_head(self, txn: Any, state: _BatchState, session_id: str) -> bytes:
        head = state.session_heads.get(session_id)
        if head is None:
            head = self._session_heads.get(session_id)
        if head is None:
            found = txn.get(scoped_prefix(session_id), db=self._env.dbs[names.SESSION_HEADS])
            head = bytes(found) if found is not None else GENESIS
        return head

    def _next_tape_seq(self, txn: Any, state: _BatchState, run_id: str) -> int:
        seq = state.tape_next.get(run_id)
        if seq is None:
            seq = self._tape_next.get(run_id)
        if seq is None:
            seq = last_scoped_number(txn, self._env.dbs[names.TAPE], run_id) + 1
        return seq

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


def _remember(memory: dict[Any, Any], committed: dict[Any, Any]) -> None:
    # Called only after a durable commit: memory never holds uncommitted values.
    if len(memory) + len(committed) > _MEMORY_LIMIT:
        memory.clear()
    memory.update(committed)


def _resolve(batch: list[Request], outcomes: list[tuple[Any, BaseException | None]]) -> None:
    # One wake-up per event loop per commit instead of one per caller.
    by_loop: dict[
        asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any, BaseException | None]]
    ] = {}
    for request, (result, error) in zip(batch, outcomes, strict=True):
        by_loop.setdefault(request.loop, []).append((request.future, result, error))
    for loop, items in by_loop.items():
        # A closed loop raises RuntimeError: nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, items)


def _settle(items: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for future, result, error in items:
        if future.done():
            continue  # caller was cancelled; the write is durable regardless
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
