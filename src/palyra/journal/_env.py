"""The LMDB environment of a journal: files, permissions, the writer lock, map growth."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lmdb

from palyra.core.errors import ErrorCode, NotFound, PalyraError
from palyra.journal._types import ENTITY_TABLES, JournalConfig
from palyra.journal.write.commitlog import CommitLog, read_header
from palyra.journal.write.durable import COMMIT_LOG_DB, Durability, prepare_files

JOURNAL_SUBDIR = "journal"
LOCK_FILE = "writer.lock"

# Internal sub-DBs (names start with "_" so they can never clash with entity
# tables): the log itself, its indexes, per-session chain heads, checkpoints.
EVENTS = "_events"
EVENT_IDS = "_event_ids"
BY_SESSION = "_by_session"
TAPE = "_tape"
SESSION_HEADS = "_session_heads"
CHECKPOINTS = "_checkpoints"
COMMIT_LOG = COMMIT_LOG_DB
# The transparency log: the Merkle tree's rows, and each tree's last signed checkpoint.
TLOG = "_tlog"
TLOG_CHECKPOINTS = "_tlog_checkpoints"
INTERNAL_DBS = (EVENTS, EVENT_IDS, BY_SESSION, TAPE, SESSION_HEADS, CHECKPOINTS, COMMIT_LOG,
                TLOG, TLOG_CHECKPOINTS)  # fmt: skip
# Journals written before the commit log or the tree lack those sub-DBs until a
# writer opens them.
_OPTIONAL_DBS = frozenset({COMMIT_LOG, TLOG, TLOG_CHECKPOINTS})


class Gate:
    """Readers-writer gate around transactions.

    LMDB's ``mdb_env_set_mapsize`` is only safe while no transaction of this
    process is open; readers (event-loop thread) take the gate shared, map
    growth takes it exclusive. Waiting growers block new readers so growth
    cannot starve.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._exclusive = False
        self._waiting = 0

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        """Hold the gate shared (any number of holders)."""
        with self._cond:
            while self._exclusive or self._waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the gate alone."""
        with self._cond:
            self._waiting += 1
            while self._exclusive or self._readers:
                self._cond.wait()
            self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


# A reader waiting for LMDB to hold answered frames asks the writer again this often
# (a newer frame may have lowered the flag after the last ask).
_REASK_S = 0.001
WRITER_THREAD = "palyra-journal-writer"
"""The writer thread's name; it never waits for its own commit to become visible."""


def journal_dir(data_dir: Path) -> Path:
    """Where the LMDB files of ``data_dir`` live."""
    return data_dir / JOURNAL_SUBDIR


class JournalEnv:
    """An open LMDB environment with all sub-DB handles."""

    def __init__(self, data_dir: Path, config: JournalConfig) -> None:
        self.data_dir = data_dir
        self.path = journal_dir(data_dir)
        self.config = config
        self.gate = Gate()
        # Cleared by the writer from a commit's frame until LMDB holds it (its
        # callers are answered in between): reads wait while it is clear, so a
        # caller always reads its own writes. ``unapplied`` is set if LMDB then
        # refused the commit; reads fail until a reopen replays the frame.
        self.visible = threading.Event()
        self.visible.set()
        self.unapplied: BaseException | None = None
        # Set by the writer: a reader about to wait asks it to commit LMDB now.
        self.on_wait: Callable[[], None] | None = None
        self.map_grows = 0
        self.closed = False
        self._lock_fd: int | None = None
        # Durable commits go through the commit log (one flush each) when syncing.
        self.durable: Durability | None = None
        log: CommitLog | None = None
        if config.readonly:
            self._open_readonly()
        else:
            # Every writable journal commits through the commit log; ``sync``
            # only says whether its writes are flushed (the same code either way).
            self._lock()
            log = CommitLog(self.path, flush=config.sync)
            prepare_files(self.path, log)
            self._open_writable()
        self.dbs: dict[str, Any] = {}
        names = (*INTERNAL_DBS, *sorted(ENTITY_TABLES))
        try:
            if config.readonly:
                # py-lmdb: handles opened inside an explicit read-only txn are
                # unusable afterwards; let open_db run its own txn.
                for name in names:
                    try:
                        self.dbs[name] = self.env.open_db(name.encode(), create=False)
                    except lmdb.NotFoundError:
                        if name not in _OPTIONAL_DBS:
                            raise
            else:
                with self.env.begin(write=True) as txn:
                    for name in names:
                        self.dbs[name] = self.env.open_db(name.encode(), txn=txn)
        except lmdb.NotFoundError as exc:
            self.close()
            raise NotFound(f"{self.path} is not a palyra journal") from exc
        if log is not None:
            durable = Durability(self.env, self.dbs, self.path, log, flush=self.config.sync)
            try:
                durable.recover()
            except BaseException:
                durable.unpin()
                log.close()
                self.close()
                raise
            self.durable = durable

    def _lock(self) -> None:
        if self._lock_fd is not None:
            return
        for directory in (self.data_dir, self.path):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(directory, 0o700)
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            raise PalyraError(
                f"data dir {self.data_dir} is locked by another palyra process"
                f"{f' (pid {holder})' if holder else ''}; stop it or use another --data-dir",
                code=ErrorCode.DATA_DIR_LOCKED,
                details={"data_dir": str(self.data_dir), "pid": holder},
            ) from exc
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def _open_writable(self) -> None:
        self._lock()
        try:
            # With sync the commit log makes commits durable; LMDB runs without
            # flushes behind it (MDB_NOSYNC) and is flushed at sync points.
            self.env = lmdb.open(
                str(self.path),
                map_size=self.config.map_size,
                subdir=True,
                max_dbs=len(INTERNAL_DBS) + len(ENTITY_TABLES) + 2,
                sync=False,
                metasync=False,
                mode=0o600,
                readahead=False,
            )
        except BaseException:
            self._release_lock()
            raise
        for name in ("data.mdb", "lock.mdb"):
            os.chmod(self.path / name, 0o600)

    def _open_readonly(self) -> None:
        if not (self.path / "data.mdb").is_file():
            raise NotFound(
                f"no journal in {self.data_dir}", details={"data_dir": str(self.data_dir)}
            )
        header = read_header(self.path)
        if header is not None and not header.clean:
            # Its writer stopped without closing (or still runs). Recover now if
            # nobody holds the writer lock: after a system crash the LMDB file
            # may only be readable once rolled back to its last sync point.
            try:
                JournalEnv(self.data_dir, JournalConfig(map_size=self.config.map_size)).close()
            except PalyraError as exc:
                if exc.code is not ErrorCode.DATA_DIR_LOCKED:
                    raise
        self.env = lmdb.open(
            str(self.path),
            subdir=True,
            readonly=True,
            max_dbs=len(INTERNAL_DBS) + len(ENTITY_TABLES) + 2,
            readahead=False,
        )

    @contextlib.contextmanager
    def read(self, *, wait: bool = True) -> Iterator[Any]:
        """A read transaction, safe against concurrent map growth; it waits until LMDB
        holds every answered commit unless ``wait`` is False (the caller knows the
        commits still being applied do not concern what it reads).

        Raises:
            PalyraError: ``UNAVAILABLE`` once the store is closed, or after a durable
                commit could not be applied.
        """
        if not self.visible.is_set() or self.unapplied is not None:
            if wait:
                self._wait_visible()
            else:
                self._refuse_unapplied()
        while True:
            if self.closed:
                raise PalyraError("the journal is closed", code=ErrorCode.UNAVAILABLE)
            with self.gate.shared():
                try:
                    txn = self.env.begin(buffers=False)
                except lmdb.MapResizedError:
                    pass  # another process grew the map: adopt its size below
                else:
                    try:
                        yield txn
                    finally:
                        txn.abort()
                    return
            with self.gate.exclusive():
                self.env.set_mapsize(0)

    def _wait_visible(self) -> None:
        # The writer answers a commit's callers before LMDB holds it (its frame
        # is the commit point): wait for that, one LMDB commit.
        if threading.current_thread().name != WRITER_THREAD:
            on_wait = self.on_wait
            if on_wait is None:
                self.visible.wait()
            # Ask the writer to commit LMDB now rather than when it next idles,
            # and again if a newer frame lowered the flag after it was asked.
            while on_wait is not None and not self.visible.is_set():
                on_wait()
                self.visible.wait(_REASK_S)
        self._refuse_unapplied()

    def _refuse_unapplied(self) -> None:
        if self.unapplied is not None:
            raise PalyraError(
                f"the journal could not apply a durable commit ({self.unapplied}); "
                "reopen it to recover",
                code=ErrorCode.UNAVAILABLE,
            )

    @property
    def map_size(self) -> int:
        """Current map size in bytes."""
        return int(self.env.info()["map_size"])

    def grow(self) -> None:
        """Double the map (called by the writer with no write txn open)."""
        if self.durable is not None:
            # mdb_env_set_mapsize needs no open txn in this process, so the
            # pinned snapshot goes; a sync point first makes it unnecessary.
            self.durable.sync_point()
            self.durable.unpin()
        with self.gate.exclusive():
            self.env.set_mapsize(self.map_size * 2)
        self.map_grows += 1
        if self.durable is not None:
            self.durable.repin()

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the fd drops the flock
            self._lock_fd = None

    def close(self) -> None:
        """Close the environment (a clean sync point first) and release the writer lock."""
        with self.gate.exclusive():
            if self.closed:
                return
            self.closed = True
            env = getattr(self, "env", None)
            if self.durable is not None:
                durable, self.durable = self.durable, None
                try:
                    durable.close()
                finally:
                    if env is not None:
                        env.close()
            elif env is not None:
                env.close()
        self._release_lock()
