"""Durable commits through the commit log: recovery, sync points and the pinned snapshot.

``write.commitlog`` says why and defines the file. This module runs the protocol
over an open LMDB environment opened with ``MDB_NOSYNC``:

* :class:`RecordingTxn` wraps a write transaction and records its writes, so
  the writer needs no second description of what it wrote;
* :meth:`Durability.log_frame` writes them as one frame (the commit point),
  :meth:`Durability.apply` and :meth:`Durability.commit_open` give them to LMDB;
* :meth:`Durability.after_commit` now and then flushes LMDB and pins that
  snapshot; the point is recorded by a sync frame written with the next
  commit's frame, and only then is the previous pin released;
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
from collections.abc import Set as AbstractSet
from itertools import repeat
from operator import itemgetter
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

COMMIT_LOG_DB = "_commit_log"
"""Internal sub-DB holding ``applied``: the last frame LMDB holds (same txn as its writes)."""

_APPLIED = b"applied"
_KEY, _VALUE = itemgetter(0), itemgetter(1)
_U64 = struct.Struct(">Q")
SYNC_EVERY_S = 2.0


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
    """A write transaction that also records every put and delete that took effect.

    ``deferred``: ``txn`` is the writer's open transaction itself (no child),
    and nothing goes into it before the frame is written. Every write is
    recorded for the frame and kept until :meth:`Durability.apply` puts it, once
    the frame is durable and its callers were answered: a lone commit's path to
    its flush pays no LMDB write, no child transaction and no abort, and a
    batch that fails before its frame (an id taken, a restart or room check)
    leaves the open transaction untouched.
    """

    __slots__ = (
        "_deletes", "_later", "_names", "_tables", "claimed", "deferred", "ops", "seq", "txn"
    )

    def __init__(self, txn: Any, names: dict[int, str], *, deferred: bool = False) -> None:
        self.txn = txn
        self._names = names
        self.deferred = deferred
        self.ops: list[Op] = []
        self.seq = 0  # the frame's number, once logged
        self.claimed: Sequence[bytes] = []  # keys put_new put (deferred)
        # Deferred writes, in order: (db, [(key, value or None for a delete)], append).
        self._later: list[tuple[Any, Sequence[tuple[bytes, bytes | None]], bool]] = []
        self._deletes = False  # a delete is among _later (put_all then writes one at a time)
        # recorded(): the sub-DBs by name and the one whose puts append (None: see _later).
        self._tables: tuple[dict[str, Any], str] | None = None

    @classmethod
    def recorded(
        cls, txn: Any, names: dict[int, str], ops: list[Op], dbs: dict[str, Any], appends: str
    ) -> RecordingTxn:
        """A deferred txn whose writes, ``ops``, were recorded by its caller.

        What the same puts and deletes (``None`` values), made one at a time on
        a deferred txn, would have recorded; the puts into sub-DB ``appends``
        append. Nothing else is kept per write until apply (``dbs`` maps the
        names in ``ops`` to their sub-DBs): a frame answered and waiting for
        LMDB holds this object, its list and its ops, and no more.
        """
        self = cls.__new__(cls)
        self.txn = txn
        self._names = names
        self.deferred = True
        self.ops = ops
        self.seq = 0
        self.claimed = ()  # the caller keeps its claims (Writer._answered_ids)
        self._later = []
        self._deletes = False  # recorded ops are looked at one by one (put_all)
        self._tables = (dbs, appends)
        return self

    def put(
        self, key: bytes, value: bytes, *, db: Any, overwrite: bool = True, append: bool = False
    ) -> bool:
        """``Transaction.put``, recorded when it wrote (deferred: recorded, put on apply)."""
        if self.deferred and overwrite:
            self.ops.append((self._names[id(db)], key, value))
            self._later.append((db, [(key, value)], append))
            return True
        done = bool(self.txn.put(key, value, db=db, overwrite=overwrite, append=append))
        if done:
            self.ops.append((self._names[id(db)], bytes(key), bytes(value)))
        return done

    def put_many(self, items: list[tuple[bytes, bytes]], *, db: Any, append: bool = False) -> None:
        """Put every ``(key, value)`` of ``items`` in one call into LMDB, recorded.

        Deferred: ``items`` is kept as it is (the caller hands it over).
        """
        # The ops made in C (zip), not by bytecode per write: a commit of many
        # appends puts hundreds of id claims here.
        self.ops += zip(repeat(self._names[id(db)]), map(_KEY, items), map(_VALUE, items))
        if self.deferred:
            self._later.append((db, items, append))
        else:
            self.txn.cursor(db=db).putmulti(items, append=append)

    def put_new(
        self, items: list[tuple[bytes, bytes]], *, db: Any, taken: AbstractSet[bytes] = frozenset()
    ) -> bool:
        """Put every ``(key, value)`` of ``items`` unless its key exists; True when all went in.

        One call into LMDB for all of them (``Cursor.putmulti``). On False some
        went in and some did not: the caller aborts the transaction. Recorded
        only when all went in. Deferred: True when no key exists yet and none
        is there twice (one ``get``, or one ``getmulti`` for several; nothing
        written); the puts follow on apply (``items`` is kept, not copied), and
        ``taken`` holds the keys of deferred txns not applied yet.
        """
        if self.deferred:
            if len(items) == 1:  # a lone append's
                [(key, value)] = items
                if key in taken or self.txn.get(key, db=db) is not None:
                    return False
                self.ops.append((self._names[id(db)], key, value))
                self._later.append((db, items, False))
                self.claimed = [key]
                return True
            keys = list(map(_KEY, items))
            if (
                len(set(keys)) != len(keys)
                or not taken.isdisjoint(keys)
                or self.txn.cursor(db=db).getmulti(keys)  # one call: what is there
            ):
                return False
            self.put_many(items, db=db)
            self.claimed = keys
            return True
        _consumed, added = self.txn.cursor(db=db).putmulti(items, overwrite=False)
        if added != len(items):
            return False
        name = self._names[id(db)]
        self.ops.extend([(name, key, value) for key, value in items])
        return True

    def delete(self, key: bytes, *, db: Any) -> bool:
        """``Transaction.delete``, recorded when it deleted.

        Deferred: recorded whether or not the key is there (replaying a delete
        of a missing key changes nothing), deleted on apply; returns True.
        """
        if self.deferred:
            self.ops.append((self._names[id(db)], key, None))
            self._later.append((db, [(key, None)], False))
            self._deletes = True
            return True
        done = bool(self.txn.delete(key, db=db))
        if done:
            self.ops.append((self._names[id(db)], bytes(key), None))
        return done

    def get(self, key: bytes, default: Any = None, *, db: Any) -> Any:
        """``Transaction.get`` (deferred: without this txn's own writes)."""
        return self.txn.get(key, default, db=db)

    def cursor(self, *, db: Any) -> Any:
        """``Transaction.cursor``."""
        return self.txn.cursor(db=db)

    @staticmethod
    def put_all(txns: Sequence[RecordingTxn]) -> None:
        """Write what deferred ``txns`` kept, in order, into their (one) transaction.

        Puts only (the usual case): one ``putmulti`` per sub-DB for all of
        them (each sub-DB's writes keep their order; the record keys grow,
        so they still append). With a delete among them, one write at a time.
        """
        if not txns:
            return
        txn = txns[0].txn
        tables = txns[0]._tables
        if tables is not None and all(each._tables is not None for each in txns):
            # Only recorded() txns (lone appends): group their ops by sub-DB in one pass.
            dbs, appends = tables
            by_name: dict[str, list[tuple[bytes, bytes | None]]] = {}
            deletes = False
            for each in txns:
                each._tables = None  # put once
                for name, key, value in each.ops:
                    pairs = by_name.get(name)
                    if pairs is None:
                        pairs = by_name[name] = []
                    pairs.append((key, value))
                    if value is None:
                        deletes = True
            if not deletes:
                for name, pairs in by_name.items():
                    cursor = txn.cursor(db=dbs[name])
                    _consumed, added = cursor.putmulti(pairs, append=name == appends)
                    if added != len(pairs):
                        raise lmdb.Error("commit log: a deferred put did not go in")
                return
            for each in txns:  # a delete among them: one write at a time, in order
                for name, key, value in each.ops:
                    if value is None:
                        txn.delete(key, db=dbs[name])
                    else:
                        txn.put(key, value, db=dbs[name], append=name == appends)
            return
        later: list[tuple[Any, Sequence[tuple[bytes, bytes | None]], bool]] = []
        deletes = False  # known per txn: no walk over every write of a big batch to find one
        for each in txns:
            tables = each._tables
            if tables is None:
                later += each._later
                each._later = []
                deletes = deletes or each._deletes
                continue
            dbs, appends = tables
            later += [(dbs[name], ((key, value),), name == appends) for name, key, value in each.ops]
            each._tables = None  # put once
            deletes = deletes or any(value is None for _name, _key, value in each.ops)
        if deletes:
            for db, items, append in later:
                for key, value in items:
                    if value is None:
                        txn.delete(key, db=db)
                    else:
                        txn.put(key, value, db=db, append=append)
            return
        groups: dict[int, tuple[Any, list[tuple[bytes, bytes | None]], bool]] = {}
        for db, items, append in later:
            group = groups.get(id(db))
            if group is None:
                groups[id(db)] = (db, list(items), append)
            else:
                group[1].extend(items)
                if not append and group[2]:
                    groups[id(db)] = (db, group[1], False)
        for db, items, append in groups.values():
            _consumed, added = txn.cursor(db=db).putmulti(items, append=append)
            if added != len(items):
                raise lmdb.Error("commit log: a deferred put did not go in")


class Durability:
    """The commit log protocol over one writable, ``MDB_NOSYNC`` LMDB environment."""

    def __init__(self, env: Any, dbs: dict[str, Any], directory: Path, log: CommitLog) -> None:
        self._env = env
        self._dbs = dbs
        self._data_file = directory / "data.mdb"
        self.log = log
        self.names = {id(handle): name for name, handle in dbs.items()}
        self._pin: Any = None
        # The previous sync point's pin, held until the sync frame of the newer
        # one (``_sync_frame``, written with the next commit frame) is durable.
        self._retiring: Any = None
        self._sync_frame = b""
        self._page = int(env.stat()["psize"])
        self._room = 0  # map pages surely free: last reading minus what commits since demanded
        self._room_reads_in = 0
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
        if self.broken is not None:
            raise PalyraError(
                "the journal could not apply a logged commit; reopen it to recover",
                code=ErrorCode.UNAVAILABLE,
            )
        if txn.ops:
            frame = encode_frame(self.next_seq, txn.ops)
            # Past the frame nothing may fail for want of room: check before it.
            self._require_headroom(len(txn.ops), len(frame), settled)
            txn.seq = self.next_seq
            if not self.log.fits(self._sync_frame + frame):
                if not settled:
                    raise Unsettled("commit log: commit LMDB before restarting the log")
                self.sync_point()  # everything before this txn is in LMDB now
            # A pending sync frame goes in the same write: no flush of its own.
            self.log.append(self._sync_frame + frame)
            self._point("frame")
            self.next_seq += 1
            self._since_commits += 1
            if self._sync_frame:
                self._sync_frame = b""
                self._release_retiring()

    def apply(self, txns: Sequence[RecordingTxn]) -> None:
        """Give LMDB the writes of ``txns`` without a flush (their frames are durable).

        Each is a child of the writer's open transaction (committed here) or,
        deferred, that transaction itself (its writes put here): LMDB holds
        them once :meth:`commit_open` commits that one.
        """
        try:
            deferred = [txn for txn in txns if txn.deferred]
            RecordingTxn.put_all(deferred)
            for txn in txns:
                if not txn.deferred:
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
        self._point("commit")

    def _require_headroom(self, ops: int, size: int, settled: bool = True) -> None:
        # LMDB can run out of map at commit (the free list needs pages too),
        # and once the frame is logged a failed commit cannot be taken back.
        # So demand generous room first: MapFullError here makes the writer
        # grow the map and redo the batch before anything is logged. A commit
        # takes fewer pages than it is asked to leave room for, so the room last
        # read less what was demanded since is a lower bound: LMDB is asked
        # again only when that runs short (or every _ROOM_READ_EVERY commits),
        # and only when it has committed every frame: env.info() does not count
        # the pages of a transaction still open. Each frame is charged for its
        # writes; each LMDB commit (many frames go into one) for its own pages
        # (_COMMIT_PAGES, charged by commit_open): a frame must leave room for
        # the commit that will carry it.
        needed = 4 * (ops * 3 + size // self._page)
        self._room_reads_in -= 1
        if needed + _COMMIT_PAGES >= self._room or (self._room_reads_in <= 0 and settled):
            if not settled:
                raise Unsettled("commit log: commit LMDB before reading its room")
            info = self._env.info()
            self._last_pgno = int(info["last_pgno"])
            self._room = int(info["map_size"]) // self._page - self._last_pgno
            self._room_reads_in = _ROOM_READ_EVERY
            if needed + _COMMIT_PAGES >= self._room:
                raise lmdb.MapFullError("commit log: not enough map left for this commit")
        self._room -= needed

    def after_commit(self) -> None:
        """Take a sync point when enough commits, log bytes or time have gone by.

        Past a quarter of the log it records the point in the header and starts
        the log over; otherwise in a sync frame written with the next commit.
        """
        if not self.sync_due():
            return
        if self.log.offset - FRAMES_AT >= SYNC_EVERY_BYTES:
            self.sync_point()
        else:
            self._env.sync(True)
            self._point("lmdb-sync")
            txnid, meta = lmdb_meta(self._data_file, self._page)
            self._sync_frame = encode_sync_frame(txnid, self.next_seq - 1, meta, self._page)
            # Pin the new point now (no commit may reuse its pages from here);
            # the old pin goes once the sync frame is durable (log_frame).
            self._retiring, self._pin = self._pin, self._env.begin()
            self._pinned_at()

    def sync_due(self) -> bool:
        """True when :meth:`after_commit` would take a sync point (LMDB must hold every frame)."""
        if self._sync_frame:
            return False  # one at a time: the last one is not recorded yet
        return (
            self.log.offset - FRAMES_AT >= SYNC_EVERY_BYTES
            or self._since_commits >= SYNC_EVERY_COMMITS
            or time.monotonic() - self._since_time >= SYNC_EVERY_S
            or (self._last_pgno - self._pinned_pgno) * self._page >= SYNC_EVERY_GROWTH
        )

    def sync_point(self, *, clean: bool = False) -> None:
        """Flush LMDB, record the point in the log header, pin its snapshot, restart the log."""
        self._env.sync(True)
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
        self._release_retiring()
        if self._pin is not None:
            self._pin.abort()
            self._pin = None

    def repin(self) -> None:
        """Pin the current snapshot again (after a map resize)."""
        self._repin()

    def close(self) -> None:
        """Clean stop: flush, mark the header clean, release the pin and the file."""
        if self.broken is None:
            self.sync_point(clean=True)
        self.unpin()
        self.log.close()
