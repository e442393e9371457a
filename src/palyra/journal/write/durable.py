"""Durable commits through the commit log: recovery, sync points and the pinned snapshot.

``write.commitlog`` says why and defines the file. This module runs the protocol
over an open LMDB environment opened with ``MDB_NOSYNC``:

* :class:`RecordingTxn` wraps a write transaction and records its writes, so
  the writer needs no second description of what it wrote;
* :meth:`Durability.log_frame` writes them as one frame (the commit point),
  :meth:`Durability.apply` and :meth:`Durability.commit_open` give them to LMDB;
* :meth:`Durability.after_commit` now and then flushes LMDB and pins that
  snapshot (after a flush on a thread of its own wrote back the bulk of the
  pages: ``write.flusher``); the point is recorded by a sync frame written
  with the next commit's frame, and only then is the previous pin released;
* :meth:`Durability.sync_point` flushes LMDB, records the point in the log
  header, pins its snapshot and starts the log over;
* :meth:`Durability.recover` replays the frames after the last sync point
  (the meta pages were already rolled back by ``prepare_files``).
"""

from __future__ import annotations

import fcntl
import os
import struct
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import lmdb

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal.write.commitlog import (
    FRAMES_AT,
    SYNC_EVERY_BYTES,
    SYNC_EVERY_COMMITS,
    CommitLog,
    Op,
    encode_frame,
    encode_sync_frame,
    lmdb_meta,
    lmdb_txnid,
    restore_lmdb_meta,
)
from palyra.journal.write.flusher import Flush

COMMIT_LOG_DB = "_commit_log"
"""Internal sub-DB holding ``applied``: the last frame LMDB holds (same txn as its writes)."""

_APPLIED = b"applied"
_U64 = struct.Struct(">Q")
SYNC_EVERY_S = 2.0
EARLY_WRITE_BACK = True
"""Write a due sync point's pages back on a thread of their own first (``write.flusher``)."""


class Slot:
    """A frame reserved in the commit log (:meth:`Durability.reserve`), not yet written."""

    __slots__ = ("carried", "data", "seq", "start")

    def __init__(self, data: bytes, start: int, seq: int, carried: bytes) -> None:
        self.data = data  # what the write puts at ``start``: the frame, after a sync frame
        self.start = start
        self.seq = seq
        self.carried = carried  # the sync frame written with it (b"": none)


class Unsettled(Exception):
    """LMDB must commit every earlier frame first (to restart the log, or to read its room)."""

SYNC_EVERY_GROWTH = 64 * 1024 * 1024
"""A sync point also comes once LMDB's file has grown this much since the pinned one.

Until the next sync point the pin keeps LMDB from reusing freed pages, so this
bounds what one interval adds to ``data.mdb`` whatever the commits' size (big
group commits hold many pages); checked from the map readings below.
"""
# Re-read LMDB's free room (env.info) at least this often; in between each
# commit spends from the last reading what _require_headroom demanded of it.
_ROOM_READ_EVERY = 64
# Map pages one LMDB commit may take beyond its frames' writes (free list, meta, root).
_COMMIT_PAGES = 64
# Room a frame must leave, in map pages: each write may touch a leaf, a branch and
# an overflow page (_PAGES_PER_WRITE), plus the frame's bytes; all of it times a
# safety factor (_ROOM_FACTOR), since a commit that ran out of map after its frame
# was logged could not be taken back.
_PAGES_PER_WRITE = 3
_ROOM_FACTOR = 4
# A reading of the room with every frame committed must leave room for this many
# frames like the one checked, or the map grows first: frames are then checked
# against readings taken while others are in flight (a quarter of the default map
# per frame at 256 appenders), instead of draining them to let LMDB commit.
_FRAMES_AHEAD = 16


def prepare_files(directory: Path, log: CommitLog) -> None:
    """Before LMDB opens: after an unclean stop, roll its meta pages back to the sync point.

    Raises:
        PalyraError: ``JOURNAL_CORRUPT`` when LMDB is *behind* the recorded sync point.
    """
    header = log.header
    data_file = directory / "data.mdb"
    if header is None or header.clean or not data_file.exists():
        return
    header = log.sync_base() or header  # a later sync frame supersedes the header
    if _open_elsewhere(directory / "lock.mdb"):
        # Another process still has the environment mapped, so the machine did
        # not go down since the last commit: the page cache holds a consistent
        # LMDB, and rolling it back would pull pages from under that reader.
        return
    txnid = lmdb_txnid(data_file, header.page_size)
    if txnid == header.txnid:
        return
    if txnid < header.txnid:
        raise PalyraError(
            f"{data_file} is older than its commit log says (txn {txnid} < {header.txnid})",
            code=ErrorCode.JOURNAL_CORRUPT,
        )
    restore_lmdb_meta(data_file, header.page_size, header.meta)


def _open_elsewhere(lock_file: Path) -> bool:
    # LMDB holds a shared fcntl lock on byte 0 of lock.mdb in every process
    # that has the environment open; an exclusive probe fails while one does.
    try:
        fd = os.open(lock_file, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
    except OSError:
        return True
    finally:
        os.close(fd)  # also drops the probe lock
    return False


class RecordingTxn:
    """The writes of one frame, recorded: the frame's ops, and how LMDB takes them.

    Two kinds, and only two:

    * :meth:`recorded` (every append and checkpoint): the writes were planned
      (``write.plan``) and nothing has touched LMDB; :meth:`put_all` puts them
      into the writer's open transaction once the frame is durable and its
      callers were answered;
    * a child of the open transaction (a prune, which reads its own writes):
      each put and delete goes into the child as it is made and is recorded
      when it took effect; :meth:`Durability.apply` commits the child.
    """

    __slots__ = ("_appends", "_dbs", "_names", "_tables", "child", "ops", "seq", "txn")

    def __init__(self, txn: Any, names: dict[int, str]) -> None:
        self.txn = txn
        self.child = True
        self.ops: list[Op] = []
        self.seq = 0  # the frame's number, once logged
        self._names = names  # sub-DB handle id -> name, to record a child's writes
        self._dbs: dict[str, Any] = {}
        self._appends = ""
        self._tables: dict[str, list[tuple[bytes, bytes]]] | None = None

    @classmethod
    def recorded(
        cls, txn: Any, ops: list[Op], dbs: dict[str, Any], appends: str,
        tables: dict[str, list[tuple[bytes, bytes]]] | None = None,
    ) -> RecordingTxn:  # fmt: skip
        """Planned writes ``ops`` (``None`` values delete) for ``txn``; puts into ``appends`` append.

        ``dbs`` maps the names in ``ops`` to their sub-DBs; ``tables``, if given,
        holds the same writes (puts only) by sub-DB. A frame answered and waiting
        for LMDB holds this object, its lists and its ops, and no more.
        """
        self = cls.__new__(cls)
        self.txn = txn
        self.child = False
        self.ops = ops
        self.seq = 0
        self._names = {}
        self._dbs = dbs
        self._appends = appends
        self._tables = tables or None
        return self

    def put(
        self, key: bytes, value: bytes, *, db: Any, overwrite: bool = True, append: bool = False
    ) -> bool:
        """``Transaction.put`` into the child, recorded when it wrote."""
        done = bool(self.txn.put(key, value, db=db, overwrite=overwrite, append=append))
        if done:
            self.ops.append((self._names[id(db)], bytes(key), bytes(value)))
        return done

    def delete(self, key: bytes, *, db: Any) -> bool:
        """``Transaction.delete`` in the child, recorded when it deleted."""
        done = bool(self.txn.delete(key, db=db))
        if done:
            self.ops.append((self._names[id(db)], bytes(key), None))
        return done

    def get(self, key: bytes, default: Any = None, *, db: Any) -> Any:
        """``Transaction.get``."""
        return self.txn.get(key, default, db=db)

    def cursor(self, *, db: Any) -> Any:
        """``Transaction.cursor``."""
        return self.txn.cursor(db=db)

    @staticmethod
    def put_all(txns: Sequence[RecordingTxn]) -> None:
        """Put the planned writes of ``txns``, in order, into their (one) open transaction.

        Puts only (the usual case): one ``putmulti`` per sub-DB for all of them
        (each sub-DB's writes keep their order; record keys grow, so they still
        append). With a delete among them, one write at a time, in order, so a
        delete after a put of the same key wins.
        """
        if not txns:
            return
        txn = txns[0].txn
        dbs, appends = txns[0]._dbs, txns[0]._appends
        by_name: dict[str, list[tuple[bytes, bytes | None]]] = {}
        deletes = False
        for each in txns:
            tables = each._tables
            if tables is not None:  # grouped by the planner: a list extend per table
                for name, items in tables.items():
                    by_name.setdefault(name, []).extend(items)
                continue
            for name, key, value in each.ops:
                by_name.setdefault(name, []).append((key, value))
                deletes = deletes or value is None
        if deletes:
            for each in txns:
                for name, key, value in each.ops:
                    if value is None:
                        txn.delete(key, db=dbs[name])
                    else:
                        txn.put(key, value, db=dbs[name], append=name == appends)
            return
        for name, pairs in by_name.items():
            _consumed, added = txn.cursor(db=dbs[name]).putmulti(pairs, append=name == appends)
            if added != len(pairs):
                raise lmdb.Error("commit log: a planned put did not go in")


class Durability:
    """The commit log protocol over one writable, ``MDB_NOSYNC`` LMDB environment."""

    def __init__(
        self, env: Any, dbs: dict[str, Any], directory: Path, log: CommitLog, *, flush: bool = True
    ) -> None:
        self._env = env
        # The flush policy: without it (``sync=False``) the same frames, sync points
        # and recovery run, and only the device flushes are left out.
        self._flush = flush
        self._dbs = dbs
        self._data_file = directory / "data.mdb"
        self.log = log
        self.names = {id(handle): name for name, handle in dbs.items()}
        self._pin: Any = None
        # The previous sync point's pin, held until the sync frame of the newer
        # one (``_sync_frame``, written with the next commit frame) is durable.
        self._retiring: Any = None
        self._sync_frame = b""
        self._early: Flush | None = None  # a due sync point's bulk, being written back
        self._page = int(env.stat()["psize"])
        self._room = 0  # map pages surely free: last reading minus what commits since demanded
        self._room_reads_in = 0
        # Pages charged to the frames reserved since LMDB last committed (in the open
        # transaction, answered, or in flight): LMDB's reading does not count them yet.
        self._uncommitted = 0
        self._last_pgno = 0  # LMDB's last used page, as last read (with the room)
        self._pinned_pgno = 0  # ... as read when the newest sync point was pinned
        self._since_commits = 0
        self._since_time = time.monotonic()
        self.next_seq = 1
        self._applied = 0  # the last frame applied, when the open txn does not say so yet
        self.broken: BaseException | None = None
        self.sync_points = 0
        # Test instrumentation: called with a label at every write point
        # ("frame", "commit", "lmdb-sync", "header") from the writer's thread.
        self.hook: Callable[[str], None] | None = None

    def recover(self) -> int:
        """Replay the frames after what LMDB holds, then take a sync point; frames replayed."""
        while True:
            try:
                applied, replayed = self._replay()
                break
            except lmdb.MapFullError:
                # No txn and no pin is open yet, so the map may grow here.
                self._env.set_mapsize(int(self._env.info()["map_size"]) * 2)
        self.next_seq = applied + 1
        self.sync_point()
        return replayed

    def _replay(self) -> tuple[int, int]:
        replayed = 0
        with self._env.begin(write=True) as txn:
            found = txn.get(_APPLIED, db=self._dbs[COMMIT_LOG_DB])
            applied = int(_U64.unpack(found)[0]) if found is not None else 0
            for seq, ops in self.log.frames(applied):
                for name, key, value in ops:
                    if value is None:
                        txn.delete(key, db=self._dbs[name])
                    else:
                        txn.put(key, value, db=self._dbs[name])
                applied = seq
                replayed += 1
            txn.put(_APPLIED, _U64.pack(applied), db=self._dbs[COMMIT_LOG_DB])
        return applied, replayed

    def log_frame(self, txn: RecordingTxn, *, settled: bool = True) -> None:
        """Write ``txn``'s writes as the next frame: the commit point, durable on return.

        The caller must :meth:`apply` ``txn`` before the open transaction
        commits, and a child ``txn`` before any other write transaction begins
        (it may answer its callers first: what they were promised is the
        frame). ``settled`` says LMDB has committed every
        earlier frame; if not, a frame that needs the log restarted, or LMDB's
        free room read again, raises :class:`Unsettled` before anything is written.
        """
        slot = self.reserve(txn, settled=settled)
        if slot is None:
            return
        try:
            self.write(slot)
        except BaseException:
            self.unreserve(slot)
            raise
        if slot.carried:
            self.landed(slot)

    def reserve(self, txn: RecordingTxn, *, settled: bool = True) -> Slot | None:
        """The next frame for ``txn``'s writes, numbered and placed, not yet written.

        On the writer's thread, while the frame before it may still be written
        (``write.writer``: two frames in flight; ``settled`` is then False). Then
        :meth:`write` (any thread, in the order of the reservations) and, if it
        carried a sync frame, :meth:`landed` (the writer's thread); or
        :meth:`unreserve` if the write, or the one of a frame reserved before
        it, failed. None: no writes.
        """
        if self.broken is not None:
            raise PalyraError(
                "the journal could not apply a logged commit; reopen it to recover",
                code=ErrorCode.UNAVAILABLE,
            )
        if not txn.ops:
            return None
        frame = encode_frame(self.next_seq, txn.ops)
        # Past the frame nothing may fail for want of room: check before it.
        self._require_headroom(len(txn.ops), len(frame), settled)
        # A pending sync frame goes in the same write: no flush of its own
        # (joined once: the frame of a big batch is large to copy twice).
        carried = self._sync_frame
        data = carried + frame if carried else frame
        start = self.log.reserve(data)
        if start < 0:  # it does not fit after the last frame
            if not settled:
                raise Unsettled("commit log: commit LMDB before restarting the log")
            self.sync_point()  # everything before this txn is in LMDB now
            carried, data = b"", frame  # the sync point's header records what it said
            start = self.log.reserve(data, grow=True)
        txn.seq = self.next_seq
        slot = Slot(data, start, txn.seq, carried)
        self.next_seq += 1
        self._sync_frame = b""
        return slot

    def write(self, slot: Slot) -> None:
        """Write a reserved frame: durable on return (the commit point). Any thread."""
        self.log.write_at(slot.data, slot.start)
        self._since_commits += 1  # (a sync point, which starts it over, waits for this write)
        if self.hook is not None:  # _point, without a call per frame
            self.hook("frame")

    def landed(self, slot: Slot) -> None:
        """After :meth:`write` of a frame that carried a sync frame, on the writer's thread:
        that sync point is durable, so the pin of the one before may go."""
        if slot.carried:
            self._release_retiring()

    def unreserve(self, slot: Slot) -> None:
        """Take back ``slot`` and every frame reserved after it (its write failed)."""
        self.next_seq = slot.seq
        self.log.offset = slot.start
        if slot.carried:
            self._sync_frame = slot.carried  # the next frame carries it again

    def apply(self, txns: Sequence[RecordingTxn]) -> None:
        """Give LMDB the writes of ``txns`` without a flush (their frames are durable).

        Planned ones are put into the writer's open transaction; a child of it
        is committed into it. LMDB holds them once :meth:`commit_open` commits.
        """
        try:
            RecordingTxn.put_all([txn for txn in txns if not txn.child])
            for txn in txns:
                if txn.child:
                    txn.txn.commit()
        except BaseException as exc:
            # The frames are durable: the commits happened, LMDB just does not
            # show them. Only recovery (a reopen) can make the two agree again.
            self.broken = exc
            raise
        for txn in txns:
            if txn.seq:
                self._applied = txn.seq

    def commit_open(self, txn: Any) -> None:
        """Commit the write transaction the applied frames went into (no flush).

        It also records the last frame applied (``_commit_log/applied``, not a
        frame op): once per LMDB commit, not per frame.
        """
        try:
            if self._applied:
                txn.put(_APPLIED, _U64.pack(self._applied), db=self._dbs[COMMIT_LOG_DB])
                self._applied = 0
            txn.commit()
        except BaseException as exc:
            self.broken = exc
            raise
        self._room -= _COMMIT_PAGES  # what the commit itself took (_require_headroom)
        self._uncommitted = 0  # every frame reserved so far is in it (the writer drained)
        self._point("commit")

    def _require_headroom(self, ops: int, size: int, settled: bool = True) -> None:
        # LMDB can run out of map at commit (the free list needs pages too),
        # and once the frame is logged a failed commit cannot be taken back.
        # So demand generous room first: MapFullError here makes the writer
        # grow the map and redo the batch before anything is logged. A commit
        # takes fewer pages than it is asked to leave room for, so the room last
        # read less what was demanded since is a lower bound: LMDB is asked
        # again only when that runs short (or every _ROOM_READ_EVERY commits,
        # when it has committed every frame). env.info() counts only committed
        # pages, not those of the transaction still open nor of frames answered
        # or in flight, so a reading with frames LMDB has not committed takes off
        # what they were charged (_uncommitted): a bound as safe as a reading
        # after a commit, without draining the frames in flight to take it (at
        # 256 appenders a frame is charged a quarter of the default map, and the
        # drain took two of every three frames out of the pipeline). Only if the
        # room is short even so must LMDB commit them first (Unsettled), since
        # they may take far less than charged. Each frame is charged for its
        # writes; each LMDB commit (many frames go into one) for its own pages
        # (_COMMIT_PAGES, charged by commit_open): a frame must leave room for
        # the commit that will carry it.
        needed = _ROOM_FACTOR * (ops * _PAGES_PER_WRITE + size // self._page)
        self._room_reads_in -= 1
        if needed + _COMMIT_PAGES >= self._room or (self._room_reads_in <= 0 and settled):
            info = self._env.info()
            self._last_pgno = int(info["last_pgno"])
            self._room = (int(info["map_size"]) // self._page - self._last_pgno
                          - self._uncommitted)
            self._room_reads_in = _ROOM_READ_EVERY
            if needed + _COMMIT_PAGES >= self._room:
                if not settled:
                    raise Unsettled("commit log: commit LMDB before reading its room")
                raise lmdb.MapFullError("commit log: not enough map left for this commit")
            if settled and needed * _FRAMES_AHEAD + _COMMIT_PAGES >= self._room:
                # Grown now, with nothing in flight: else the frames that follow would
                # find the room short while others are in flight, and drain them.
                raise lmdb.MapFullError("commit log: too little map left for frames ahead")
        self._room -= needed
        self._uncommitted += needed

    def after_commit(self) -> None:
        """Take a sync point when enough commits, log bytes or time have gone by.

        Past a quarter of the log it records the point in the header and starts
        the log over; otherwise in a sync frame written with the next commit.
        """
        if not self.sync_due() or not self._written_back():
            return
        if self.log.offset - FRAMES_AT >= SYNC_EVERY_BYTES:
            self.sync_point()
        else:
            self._env.sync(self._flush)
            self._point("lmdb-sync")
            txnid, meta = lmdb_meta(self._data_file, self._page)
            self._sync_frame = encode_sync_frame(txnid, self.next_seq - 1, meta, self._page)
            # Pin the new point now (no commit may reuse its pages from here);
            # the old pin goes once the sync frame is durable (log_frame).
            self._retiring, self._pin = self._pin, self._env.begin()
            self._pinned_at()

    def _written_back(self) -> bool:
        """Whether the due sync point may flush now: once an early flush of the pages
        dirtied so far returned (``write.flusher``); False while it runs."""
        if not (self._flush and EARLY_WRITE_BACK):
            return True  # no flush to take off the commit path
        if self._early is None:
            self._early = Flush(self._env, self._flush)
            return False
        if not self._early.done():
            return False
        self._early = None
        return True

    def _await_early(self) -> None:
        # Before a flush of the writer's own, a map resize or closing: none may overlap it.
        if self._early is not None:
            self._early.wait()
            self._early = None

    def sync_due(self) -> bool:
        """True when :meth:`after_commit` would take a sync point (LMDB must hold every frame)."""
        if self._sync_frame:
            return False  # one at a time: the last one is not recorded yet
        if self._early is not None:
            return self._early.done()  # it falls due again once the early flush returned
        return (
            self.log.offset - FRAMES_AT >= SYNC_EVERY_BYTES
            or self._since_commits >= SYNC_EVERY_COMMITS
            or time.monotonic() - self._since_time >= SYNC_EVERY_S
            or (self._last_pgno - self._pinned_pgno) * self._page >= SYNC_EVERY_GROWTH
        )

    def sync_point(self, *, clean: bool = False) -> None:
        """Flush LMDB, record the point in the log header, pin its snapshot, restart the log."""
        self._await_early()
        self._env.sync(self._flush)
        self._point("lmdb-sync")
        txnid, meta = lmdb_meta(self._data_file, self._page)
        self.log.write_header(txnid, self.next_seq - 1, meta, self._page, clean=clean)
        self._point("header")
        self._sync_frame = b""  # the header records a newer point
        self._release_retiring()
        if clean:
            self.unpin()
        else:
            self._repin()
        self.log.restart()
        self._pinned_at()

    def _pinned_at(self) -> None:
        # A new sync point: its counters start over from here.
        self._since_commits = 0
        self._since_time = time.monotonic()
        self._last_pgno = self._pinned_pgno = int(self._env.info()["last_pgno"])
        self.sync_points += 1

    def _point(self, label: str) -> None:
        if self.hook is not None:
            self.hook(label)

    def _repin(self) -> None:
        # The new pin first: the old snapshot's pages stay safe until the new one holds.
        pin = self._env.begin()
        old, self._pin = self._pin, pin
        if old is not None:
            old.abort()

    def _release_retiring(self) -> None:
        if self._retiring is not None:
            self._retiring.abort()
            self._retiring = None

    def unpin(self) -> None:
        """Drop the pinned snapshots (before a map resize, or at close)."""
        self._await_early()
        self._release_retiring()
        if self._pin is not None:
            self._pin.abort()
            self._pin = None

    def repin(self) -> None:
        """Pin the current snapshot again (after a map resize)."""
        self._repin()

    def close(self) -> None:
        """Clean stop: flush, mark the header clean, release the pin and the file."""
        self._await_early()
        if self.broken is None:
            self.sync_point(clean=True)
        self.unpin()
        self.log.close()
