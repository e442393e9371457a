"""The LMDB environment of a journal: files, permissions, the writer lock, map growth."""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb

from palyra.core.errors import ErrorCode, NotFound, PalyraError
from palyra.journal._types import ENTITY_TABLES, JournalConfig

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
INTERNAL_DBS = (EVENTS, EVENT_IDS, BY_SESSION, TAPE, SESSION_HEADS, CHECKPOINTS)


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
        self.map_grows = 0
        self.closed = False
        self._lock_fd: int | None = None
        if config.readonly:
            self._open_readonly()
        else:
            self._open_writable()
        self.dbs: dict[str, Any] = {}
        names = (*INTERNAL_DBS, *sorted(ENTITY_TABLES))
        try:
            if config.readonly:
                # py-lmdb: handles opened inside an explicit read-only txn are
                # unusable afterwards; let open_db run its own txn.
                for name in names:
                    self.dbs[name] = self.env.open_db(name.encode(), create=False)
            else:
                with self.env.begin(write=True) as txn:
                    for name in names:
                        self.dbs[name] = self.env.open_db(name.encode(), txn=txn)
        except lmdb.NotFoundError as exc:
            self.close()
            raise NotFound(f"{self.path} is not a palyra journal") from exc

    def _open_writable(self) -> None:
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
        try:
            self.env = lmdb.open(
                str(self.path),
                map_size=self.config.map_size,
                subdir=True,
                max_dbs=len(INTERNAL_DBS) + len(ENTITY_TABLES) + 2,
                sync=self.config.sync,
                metasync=self.config.sync,
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
        self.env = lmdb.open(
            str(self.path),
            subdir=True,
            readonly=True,
            max_dbs=len(INTERNAL_DBS) + len(ENTITY_TABLES) + 2,
            readahead=False,
        )

    @contextlib.contextmanager
    def read(self) -> Iterator[Any]:
        """A read transaction, safe against concurrent map growth.

        Raises:
            PalyraError: ``UNAVAILABLE`` once the store is closed.
        """
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

    @property
    def map_size(self) -> int:
        """Current map size in bytes."""
        return int(self.env.info()["map_size"])

    def grow(self) -> None:
        """Double the map (called by the writer with no write txn open)."""
        with self.gate.exclusive():
            self.env.set_mapsize(self.map_size * 2)
        self.map_grows += 1

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the fd drops the flock
            self._lock_fd = None

    def close(self) -> None:
        """Close the environment and release the writer lock."""
        with self.gate.exclusive():
            self.closed = True
            env = getattr(self, "env", None)
            if env is not None:
                env.close()
        self._release_lock()
