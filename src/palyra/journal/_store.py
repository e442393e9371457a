"""``JournalStore``: the journal's public facade over LMDB."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeVar, overload

from palyra.core.errors import ErrorCode, NotFound, PalyraError, PalyraInternalError
from palyra.core.histogram import Histogram
from palyra.journal._env import JournalEnv, journal_dir
from palyra.journal._types import (
    DEFAULT_MAX_TAPE_BYTES,
    Checkpoint,
    EventDraft,
    JournalConfig,
    JournalHead,
    JournalStats,
    Lease,
    RowExpectation,
    StoredEvent,
    TapePage,
)
from palyra.journal.fencing import ambient_fence, declared
from palyra.journal.format.signing import Signer
from palyra.journal.postgres.pointer import read_pointer
from palyra.journal.read import reads as _reads
from palyra.journal.read import tlog as _tlog
from palyra.journal.read.entity_cache import MAX_TRACKED_KEYS, TRACKED_KEYS, EntityCache
from palyra.journal.read.follow import FollowHub, Subscription, follow_batches, follow_events
from palyra.journal.retention.prune import PruneOrder, PruneResult
from palyra.journal.tlog.note import Witness, parse_checkpoint, parse_note
from palyra.journal.tlog.session_proofs import write_lines
from palyra.journal.write import requests
from palyra.journal.write.prepare import prepare
from palyra.journal.write.requests import Answer, Request
from palyra.journal.write.stats import CommitTimings, WriterStats
from palyra.journal.write.writer import Writer

_PAGE = 256
_SCAN_PAGE = 10_000  # rows per read while the tracked key ranges are scanned at open
_A = TypeVar("_A", bound=Answer)  # what ``submit`` answers, when the caller brings it
# Backends beside LMDB, by their ``[journal] backend`` name: the module whose
# ``open_store(data_dir, config)`` opens one (a ``JournalStore`` subclass).
_BACKEND_MODULES = {"postgres": "palyra.journal.postgres.store"}


def _position(event: StoredEvent) -> int:
    return event.position


def _tape_seq(event: StoredEvent) -> int:
    return event.tape_seq


class CommitQueue(Protocol):
    """What the store needs of a writer: LMDB's ``Writer`` or PostgreSQL's."""

    submit: Callable[[Request], None]
    stats: WriterStats

    def stop(self) -> None:
        """Finish every queued request, then stop."""


class JournalStore:
    """Append-only, hash-chained event log with indexes and entity tables.

    Reads are synchronous (LMDB reads are memory-mapped and short); ``append``
    and ``checkpoint`` are awaited because they wait for a durable commit.
    """

    def __init__(self, env: JournalEnv, config: JournalConfig) -> None:
        self._env = env
        self._config = config
        self._hub = FollowHub(config.follow_buffer_events, config.follow_buffer_bytes)
        self._writer: CommitQueue | None = None
        self._signer: Signer | None = None
        self._closed = False
        self._entities: EntityCache | None = None
        if not config.readonly:
            self._entities = EntityCache()
            self._track_keys(self._entities)
            self._writer = Writer(env, config.max_batch_events, self._hub.deliveries,
                                  self._entities.wrote, self._hub.followed,
                                  self._entities.applied)

    def _track_keys(self, cache: EntityCache) -> None:
        """Let the cache answer for keys no row holds in its tracked ranges (a new
        conversation's session looked up by key, ``core/key_filter.py``): built from the
        keys LMDB holds now, after recovery and before the writer takes a commit; not
        for a range of more than ``MAX_TRACKED_KEYS``."""
        for table, prefix in TRACKED_KEYS.items():
            keys: list[str] = []
            after = ""
            while len(keys) <= MAX_TRACKED_KEYS:
                rows = _reads.scan_entities(self._env, table, prefix, after, _SCAN_PAGE)
                keys += [key for key, _value in rows]
                if len(rows) < _SCAN_PAGE:
                    cache.track_keys(table, prefix, keys)
                    break
                after = rows[-1][0]

    @classmethod
    def open(cls, data_dir: Path, *, config: JournalConfig | None = None) -> JournalStore:
        """Open (creating if needed) the journal of ``data_dir``.

        Raises:
            PalyraError: ``DATA_DIR_LOCKED`` when another process has the data
                dir open for writing.
            NotFound: read-only open of a data dir without a journal.
        """
        config = config or JournalConfig()
        if config.backend == "lmdb":
            # A data dir whose daemon runs on PostgreSQL says so: read-only opens
            # (verify, export by path) follow it; a writable one must not start a
            # second, LMDB journal beside it.
            dsn = read_pointer(journal_dir(Path(data_dir)))
            if dsn is not None and config.readonly:
                config = dataclasses.replace(config, backend="postgres", dsn=dsn)
            elif dsn is not None:
                raise PalyraError(
                    f"the journal of {data_dir} is on PostgreSQL (journal/postgres.json): set "
                    '[journal] backend = "postgres" and its dsn, or remove that file to '
                    "start an LMDB journal",
                    code=ErrorCode.CONFIG_INVALID, details={"data_dir": str(data_dir)},
                )
        if config.backend != "lmdb":
            # Imported by name, only when chosen: an LMDB daemon never loads psycopg,
            # and the facade does not depend on its subclasses.
            backend = importlib.import_module(_BACKEND_MODULES[config.backend])
            opened: JournalStore = backend.open_store(Path(data_dir), config)
            return opened
        return cls(JournalEnv(Path(data_dir), config), config)

    @property
    def data_dir(self) -> Path:
        """The data dir this store was opened on."""
        return self._env.data_dir

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    @property
    def env(self) -> JournalEnv:
        """The underlying environment (verification and export read through it)."""
        return self._env

    def _writer_or_raise(self) -> CommitQueue:
        if self._closed:
            raise PalyraError("the journal is closed", code=ErrorCode.UNAVAILABLE)
        if self._writer is None:
            raise PalyraInternalError("the journal was opened read-only")
        return self._writer

    async def append(
        self, drafts: Sequence[EventDraft], *, fence: Lease | None = None,
        expect: Sequence[RowExpectation] = (),
    ) -> list[StoredEvent]:
        """Append ``drafts`` atomically; return once the commit is durable.

        ``fence``: commit only while this lease is its name's current term
        (PostgreSQL; on LMDB one daemon holds every lease and it always is). Without
        one, the lease the calling task declared with ``fencing.fenced_writes``, if any.
        ``expect``: commit only while each row holds the value expected (PostgreSQL,
        checked in the commit, after the fence). On LMDB it is not read back: the
        one daemon's callers decide on rows they hold; pass it only if :attr:`shared`.

        Raises:
            InvalidArgument: a draft is malformed.
            AlreadyExists: an ``event_id`` is already in the journal (or twice in ``drafts``).
            PalyraError: ``PAYLOAD_TOO_LARGE`` over a size cap; ``UNAVAILABLE``
                when the store is closed or the commit failed; ``LEASE_STALE``
                when ``fence`` was taken over, ``STATE_CONFLICT`` when a row of
                ``expect`` holds another value (nothing of ``drafts`` is written).
        """
        future = self.submit(drafts, fence=fence, expect=expect)
        # Let go of the drafts while the commit is pending: their payloads were
        # copied by prepare, and a caller that no longer holds them (a list built
        # in the call) frees them now instead of keeping them, and the cycle
        # collector's work, alive across the commit.
        del drafts
        return await future

    @overload
    def submit(
        self, drafts: Sequence[EventDraft], *, fence: Lease | None = None,
        expect: Sequence[RowExpectation] = (), loop: asyncio.AbstractEventLoop | None = None,
        answer: None = None,
    ) -> asyncio.Future[list[StoredEvent]]: ...

    @overload
    def submit(
        self, drafts: Sequence[EventDraft], *, fence: Lease | None = None,
        expect: Sequence[RowExpectation] = (), loop: asyncio.AbstractEventLoop | None = None,
        answer: _A,
    ) -> _A: ...

    def submit(
        self, drafts: Sequence[EventDraft], *, fence: Lease | None = None,
        expect: Sequence[RowExpectation] = (), loop: asyncio.AbstractEventLoop | None = None,
        answer: Answer | None = None,
    ) -> Answer:
        """Validate and queue ``drafts`` now; the future resolves once the commit is durable.

        The synchronous half of :meth:`append`, for a caller that must not lose
        track of a queued write when it is cancelled: it can ``shield`` the
        future itself instead of wrapping ``append`` in a task of its own
        (one task and one event-loop turn fewer per commit on the engine's path).
        Errors in the drafts raise here, before anything is queued; cancelling
        the future does not un-append.

        ``loop``: the running event loop, when the caller holds it (asking asyncio costs
        a lookup, and on this Python a ``getpid()`` system call, per commit).
        ``answer``: answered instead of a new future, and returned: once the commit is
        durable (or failed) ``answer.set_result(events)`` (or ``set_exception``) is
        called on the loop, unless ``answer.done()``; drafts that prepare to nothing are
        answered before this returns. A caller that reacts to its commit in a plain
        method so saves the future and the loop turn a done-callback would take.

        Raises:
            InvalidArgument, AlreadyExists, PalyraError: as :meth:`append`.
        """
        writer = self._writer
        if writer is None or self._closed:
            writer = self._writer_or_raise()
        prepared = prepare(drafts, self._config)
        if loop is None:
            loop = asyncio.get_running_loop()
        if answer is None:
            answer = loop.create_future()
        if not prepared:
            answer.set_result([])
        else:
            if fence is None and declared() is not None:
                fence = ambient_fence()  # a singleton's work: fenced by its lease
            if expect:
                writer.submit(requests.ExpectingAppend(loop, answer, prepared, tuple(expect))
                              if fence is None else requests.FencedExpectingAppend(
                                  loop, answer, prepared, tuple(expect), fence))
            else:
                writer.submit(requests.Append(loop, answer, prepared) if fence is None
                              else requests.FencedAppend(loop, answer, prepared, fence))
        return answer

    def on_foreign_rows(self, listener: Callable[[list[tuple[str, str]]], None]) -> None:
        """Call ``listener`` with the rows other daemons' commits write (never on LMDB,
        which no other daemon writes)."""

    def on_foreign_unknown(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` when other daemons' commits were found whose rows could not
        be told (the watcher fell too far behind): memory that follows
        :meth:`on_foreign_rows` missed them and must read again what it holds. Never on
        LMDB."""

    @property
    def shared(self) -> bool:
        """Whether other daemons may write this journal too (PostgreSQL): decisions
        made on rows read here must then be conditions of their commits (``expect``)."""
        return False

    def database_time_ms(self) -> int | None:
        """Milliseconds since the epoch on the clock every daemon of a shared journal
        agrees on (the database server's), or None where this daemon's clock is the only
        one (LMDB)."""
        return None

    async def checkpoint(self) -> Checkpoint:
        """Sign the current global head with the data dir's ed25519 key and store it."""
        writer = self._writer_or_raise()
        if self._signer is None:
            self._signer = Signer.load_or_create(self._env.path)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Checkpoint] = loop.create_future()
        writer.submit(requests.Checkpoint(loop, future, self._signer))
        return await future

    async def prune_batch(self, order: PruneOrder) -> PruneResult:
        """Turn at most ``order.max_records`` of the oldest prunable records into tombstones.

        One durable commit through the writer, with a ``journal.pruned`` event
        (see ``retention.prune``); ``palyra.journal.prune_older_than`` loops over this.
        """
        writer = self._writer_or_raise()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[PruneResult] = loop.create_future()
        writer.submit(requests.Prune(loop, future, order))
        return await future

    # --- the transparency log (docs/journal/format.md, "Transparency log") ---

    def _tree_signer(self) -> Signer:
        if self._signer is None:
            self._signer = Signer.load_or_create(self._env.path)
        return self._signer

    async def sign_tree(self, origin: str | None = None) -> bytes:
        """Sign the tree as it stands after every queued append (C2SP checkpoint).

        Returns the stored signed note: a new one when the tree grew since the
        last, else the last one unchanged.

        Raises:
            PalyraError: ``JOURNAL_CORRUPT`` when the tree does not extend the last
                signed checkpoint (the log never signs two inconsistent ones).
        """
        writer = self._writer_or_raise()
        signer = self._tree_signer()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bytes] = loop.create_future()
        # No origin: the configured one, else the stored checkpoint's, else the default
        # (decided in the writer's txn).
        writer.submit(requests.TreeSign(loop, future, signer,
                                        origin or self._config.tlog_origin or ""))
        return await future

    async def add_cosignatures(self, note: bytes, witnesses: Sequence[Witness]) -> bytes:
        """Store the valid ``tlog-cosignature`` lines of ``note`` by ``witnesses``.

        Raises:
            InvalidArgument: ``note`` is not the current checkpoint, or holds no
                valid cosignature by a configured witness.
        """
        writer = self._writer_or_raise()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bytes] = loop.create_future()
        writer.submit(requests.TreeSign(loop, future, self._tree_signer(), "", note,
                                        tuple(witnesses)))  # fmt: skip
        return await future

    def tree_checkpoint(self) -> bytes | None:
        """The last signed checkpoint note (with cosignatures), or None before the first."""
        with self._env.read() as txn:
            return _tlog.signed_note(self._env, txn)

    def tree_size(self) -> int:
        """Entries (records) in the stored tree."""
        with self._env.read() as txn:
            return _tlog.tree_of(self._env, txn).size

    def prove_position(self, position: int) -> bytes:
        """The ``tlog-proof`` of the record holding ``position`` under the last signed checkpoint.

        Raises:
            NotFound: no record holds ``position`` within the signed checkpoint.
            InvalidArgument: the record is not provable (pruned, or format 1).
        """
        with self._env.read() as txn:
            return _tlog.prove_position(self._env, txn, position)

    def consistency(self, old: int, new: int) -> list[bytes]:
        """The RFC 9162 consistency proof between tree sizes ``old`` and ``new``.

        Raises:
            InvalidArgument: not ``0 <= old <= new <= size``.
        """
        with self._env.read() as txn:
            return _tlog.consistency(self._env, txn, old, new)

    def export_session_proofs(self, session_id: str, out: Path) -> int:
        """Write ``session_id``'s records with their inclusion proofs (``tlog.session_proofs``)
        under the last signed checkpoint; sealed when the data dir's key is readable.

        Returns the records written.

        Raises:
            NotFound: no checkpoint is signed yet.
        """
        signer = Signer.load(self._env.path)
        with self._env.read() as txn:
            note = _tlog.signed_note(self._env, txn)
            if note is None:
                raise NotFound("the transparency log has no signed checkpoint yet")
            size = parse_checkpoint(parse_note(note).body).size
            records = _tlog.session_records(self._env, txn, session_id, size)
            lines = write_lines(session_id, note, records,
                                signer.sign if signer else None,
                                signer.public_key if signer else b"")  # fmt: skip
            tmp = out.with_name(f".{out.name}.tmp")
            count = -3
            with open(tmp, "wb") as handle:
                for data in lines:
                    handle.write(data)
                    count += 1
        tmp.replace(out)
        return count

    def tile(self, level: int, index: int, width: int) -> bytes:
        """A ``tlog-tiles`` tile (level ``-1``: an entry bundle).

        Raises:
            NotFound: the tree does not hold it.
        """
        with self._env.read() as txn:
            return _tlog.tile(self._env, txn, level, index, width)

    def pruned_through(self) -> int:
        """The last position retention pruned (0 when none): cursors below it are truncated."""
        with self._env.read() as txn:
            return _reads.pruned_through(self._env, txn)

    def checkpoints(self) -> list[Checkpoint]:
        """Stored checkpoints, oldest position first."""
        return [
            Checkpoint(r.position, r.head.hex(), r.ts_ms, r.public_key.hex(), r.signature.hex())
            for r in _reads.checkpoints(self._env)
        ]

    def last_checkpoint(self) -> Checkpoint | None:
        """The checkpoint of the highest position, or None when there is none."""
        r = _reads.last_checkpoint(self._env)
        if r is None:
            return None
        return Checkpoint(r.position, r.head.hex(), r.ts_ms, r.public_key.hex(),
                          r.signature.hex())

    def get_entity(self, table: str, key: str, *, fresh: bool = False) -> bytes | None:
        """The value of ``table``/``key`` or None.

        ``fresh``: read the store itself, not this daemon's cache (which follows other
        daemons' writes only as its watcher finds them): after a compare-and-set
        failed, the row that beat it.
        """
        cache = self._entities
        if cache is None:
            return _reads.get_entity(self._env, table, key)
        hit, value = cache.get(table, key) if not fresh else (False, None)
        if hit:
            return value
        if not fresh and cache.absent(table, key):
            return None
        clock = cache.clock()  # before the read: see read/entity_cache
        # A row no unapplied commit wrote is read at once: waiting for LMDB to apply
        # frames that did not touch it would block the event loop for nothing.
        value = _reads.get_entity(self._env, table, key, wait=not cache.settled(table, key))
        cache.put(table, key, clock, value)
        return value

    def table_version(self, table: str) -> int:
        """A number that changes whenever a commit of this process writes ``table``
        (-1 on a read-only store, which cannot know: treat every look as new)."""
        return self._entities.version(table) if self._entities is not None else -1

    def foreign_writes(self, table: str) -> int:
        """A number that changes whenever another daemon's commit writes ``table`` (always 0
        where no other daemon writes this journal: LMDB, or a read-only store). For memory
        kept outside the entity cache that only this daemon's own commits update."""
        return self._entities.foreign_writes(table) if self._entities is not None else 0

    def foreign_unknown(self) -> int:
        """A number that changes whenever other daemons' commits were found whose rows
        could not be told (the watcher fell too far behind): memory that follows
        :meth:`on_foreign_rows` missed them and must stop trusting itself. Always 0 where
        no other daemon writes this journal."""
        return self._entities.foreign_unknown() if self._entities is not None else 0

    def scan_entities(
        self, table: str, prefix: str = "", after_key: str = "", limit: int = 1000
    ) -> list[tuple[str, bytes]]:
        """Rows of ``table`` with key prefix ``prefix`` after ``after_key`` (exclusive)."""
        return _reads.scan_entities(self._env, table, prefix, after_key, limit)

    def scan_entities_before(
        self, table: str, before_key: str = "", limit: int = 1000
    ) -> list[tuple[str, bytes]]:
        """Rows of ``table`` before ``before_key`` (exclusive; all when empty), newest key first."""
        return _reads.scan_entities_before(self._env, table, before_key, limit)

    def read_range(self, after_position: int = 0, limit: int = 100) -> list[StoredEvent]:
        """Events after ``after_position`` (exclusive; positions start at 1)."""
        return _reads.read_range(self._env, after_position, limit)

    def read_session(
        self, session_id: str, after_position: int = 0, limit: int = 100
    ) -> list[StoredEvent]:
        """Events of ``session_id`` after ``after_position``."""
        return _reads.read_session(self._env, session_id, after_position, limit)

    def read_tape(
        self,
        run_id: str,
        after_seq: int = -1,
        limit: int = 100,
        max_bytes: int = DEFAULT_MAX_TAPE_BYTES,
    ) -> TapePage:
        """A page of ``run_id``'s tape (``limit`` clamped to 1..1000).

        Raises:
            PalyraError: ``RESOURCE_EXHAUSTED`` when one event exceeds ``max_bytes``.
        """
        return _reads.read_tape(self._env, run_id, after_seq, limit, max_bytes)

    def read_tape_kept(self, run_id: str, after_seq: int = -1, limit: int = 100) -> TapePage:
        """:meth:`read_tape`, but a cursor into pruned data reads on from the earliest kept seq.

        For the daemon's own readers that want whatever is left of an old tape
        (the previous run's conversation, a run's replies); client cursors use
        :meth:`read_tape` and get ``CURSOR_TRUNCATED``.
        """
        try:
            return self.read_tape(run_id, after_seq, limit)
        except PalyraError as exc:
            if exc.code is not ErrorCode.CURSOR_TRUNCATED:
                raise
            return self.read_tape(run_id, int(exc.details["earliest_cursor"]), limit)

    def head(self) -> JournalHead:
        """Event count and global head hash."""
        with self._env.read() as txn:
            count, head = _reads.load_head(self._env, txn)
        return JournalHead(count, head.hex())

    def last_tape_seq(self, run_id: str) -> int:
        """Highest tape_seq of ``run_id`` or -1."""
        return _reads.last_tape_seq(self._env, run_id)

    def follow(self, after_position: int = 0) -> AsyncIterator[StoredEvent]:
        """Replay events after ``after_position``, then yield new ones as they commit.

        Live events are the writer's own (shared, read-only) objects, not re-reads.
        """
        return follow_events(
            self._hub,
            None,
            lambda after: self.read_range(after, _PAGE),
            _position,
            after_position,
        )

    def follow_tape(self, run_id: str, after_seq: int = -1) -> AsyncIterator[StoredEvent]:
        """Replay ``run_id``'s tape after ``after_seq``, then follow it live.

        Only commits that touch ``run_id``'s tape wake this follower.
        """
        return follow_events(
            self._hub,
            run_id,
            lambda after: self.read_tape(run_id, after, _PAGE).events,
            _tape_seq,
            after_seq,
        )

    def follow_tape_batches(
        self, run_id: str, after_seq: int = -1, *, since_start: Subscription | None = None
    ) -> AsyncGenerator[list[StoredEvent], None]:
        """:meth:`follow_tape` in batches: a replay page, or what one commit put on the tape.

        ``since_start``: :meth:`subscribe_tape`'s subscription, taken before the run
        started (``after_seq`` -1): the follower starts from memory, not the store.
        """
        return follow_batches(
            self._hub,
            run_id,
            lambda after: self.read_tape(run_id, after, _PAGE).events,
            _tape_seq,
            after_seq,
            since_start,
        )

    def subscribe_tape(self, run_id: str) -> Subscription:
        """Buffer ``run_id``'s tape events from now on, for :meth:`follow_tape_batches`.

        For a run not started yet: its follower then never reads the store to
        start. Pass it to ``follow_tape_batches(since_start=...)``, or give it back
        with :meth:`unsubscribe` if the run does not start.
        """
        return self._hub.subscribe(run_id)

    def tap_commits(self, tap: Callable[[Sequence[tuple[StoredEvent, int]]], None]
                    ) -> Callable[[Sequence[tuple[StoredEvent, int]]], None]:
        """Hand every commit's ``(event, size)`` pairs to ``tap`` from now on, on the
        thread that committed them, in the writer's own wake-up, before the commit is
        answered (``/metrics``' fold: no event-loop hop, and what an append wrote is
        counted by the time it returns). On PostgreSQL, other daemons' commits come
        from the watch thread, so two threads may call ``tap``: it must be quick,
        thread-safe and must not raise (an exception is swallowed and counted).
        :meth:`untap` ends it.
        """
        return self._hub.tap(tap)

    def untap(self, tap: Callable[[Sequence[tuple[StoredEvent, int]]], None]) -> None:
        """Stop calling a :meth:`tap_commits` tap (again is harmless)."""
        self._hub.untap(tap)

    def unsubscribe(self, subscription: Subscription) -> None:
        """Drop a subscription (again is harmless)."""
        self._hub.unsubscribe(subscription)

    def stats(self) -> JournalStats:
        """Commit and append counters since open."""
        s = self._writer.stats if self._writer is not None else None
        return JournalStats(
            commits=s.commits if s else 0,
            appended_events=s.appended_events if s else 0,
            appended_bytes=s.appended_bytes if s else 0,
            append_calls=s.append_calls if s else 0,
            max_batch_calls=s.max_batch_calls if s else 0,
            map_size=self._env.map_size,
            map_grows=self._env.map_grows,
            records=s.records if s else 0,
        )

    def commit_timings(self) -> tuple[CommitTimings | None, Histogram | None]:
        """The writer's per-commit histograms and the commit log's frame-write (fsync) one.

        None where this store has no writer or no commit log (read-only, no sync).
        """
        durable = self._env.durable
        return (self._writer.stats.timings if self._writer is not None else None,
                durable.log.write_seconds if durable is not None else None)

    def map_used(self) -> int:
        """Bytes of the LMDB map in use (pages up to the last one written)."""
        env = self._env.env
        return (int(env.info()["last_pgno"]) + 1) * int(env.stat()["psize"])

    def close(self) -> None:
        """Commit what is queued, stop the writer, close LMDB and release the lock."""
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            self._writer.stop()
        self._hub.close()
        self._env.close()

    async def __aenter__(self) -> JournalStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __enter__(self) -> JournalStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
