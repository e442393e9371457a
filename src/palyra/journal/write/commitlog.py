"""The commit log: one device flush per durable commit, with LMDB applied behind it.

An LMDB commit with ``sync`` needs two flushes (its pages, then its meta
page). Instead, every commit's writes are first appended to ``commit.log``
as one frame, written with ``O_DSYNC`` into a preallocated, pre-zeroed file:
one flush, and the commit is durable. Then the same writes commit to LMDB
without a flush (``MDB_NOSYNC``): readers see them at once. Every so often
(``SYNC_EVERY_COMMITS`` commits, two seconds) the writer flushes LMDB and
records that point in a *sync frame* that goes to the disk in the same write
as the next commit's frame, so a sync point costs one flush of its own. Now
and then (a quarter of the log, a map resize, close) it records the point in
the log header instead and starts the log over.

LMDB's own warning applies: after a *system* crash an ``MDB_NOSYNC``
database may be corrupt, because its newest meta page can reach the disk
before the pages it points to. Two things make the last flushed state (the
*sync point*) always recoverable:

* the writer holds a read transaction on the sync point's snapshot until the
  next one, so LMDB never reuses (overwrites) a page that snapshot can reach;
* the sync point keeps a copy of its meta page (in the header or a sync
  frame). Recovery writes the newest durable one back over both meta slots, so LMDB opens at the sync point whatever later,
  unflushed commits left on disk, and then replays every frame after it.

A process crash (SIGKILL) leaves the page cache intact; recovery then rolls
back to the sync point and replays the same frames, which ends in the same
state. ``docs/journal/format.md`` gives the byte layout.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import msgspec

from palyra.core.histogram import SECONDS_BUCKETS, Histogram

LOG_FILE = "commit.log"
LOG_SIZE = 16 * 1024 * 1024
SLOT = 4096
FRAMES_AT = 2 * SLOT
# A sync point costs one flush of its own (LMDB's fdatasync; its sync frame
# rides on the next commit's write). Until the next one, the pinned snapshot
# keeps LMDB from reusing the pages its commits free, so the interval trades
# flushes for file growth. The writer applies several frames per LMDB commit,
# which frees far fewer pages: on the tool-loop bench 1024 frames cost 0.2 %
# more flushes and a 14.8 MiB data.mdb (256: 0.4 % and 8.9 MiB; one LMDB commit
# per frame and 256 needed 23.5 MiB). See docs/journal/design.md.
SYNC_EVERY_COMMITS = 1024
SYNC_EVERY_BYTES = LOG_SIZE // 4
"""Past this many bytes of frames the next sync point writes the header and restarts the log."""

META_BYTES = 256
"""How much of an LMDB meta page the header keeps: the page header and ``MDB_meta``."""

_FRAME_MAGIC = b"PJCF"
_FRAME = struct.Struct(">4sQII")  # magic, seq, payload length, crc32(seq, length, payload)
# A sync frame has a frame's shape with "applied" in the seq field; its payload
# is the sync point: u64 LMDB txnid, u32 page size, the meta page's first bytes.
_SYNC_MAGIC = b"PJCS"
_SYNC = struct.Struct(">QI")
_HEADER_MAGIC = b"PJCH"
_HEADER = struct.Struct(">4sIQQQII")  # magic, version, generation, txnid, applied, clean, page
_HEADER_VERSION = 2  # 2: the frames may hold sync frames (1 never wrote any)
_HEADER_VERSIONS = (1, 2)
_U64 = struct.Struct(">Q")
_SEQ_LEN = struct.Struct(">QI")  # a frame's seq and payload length, as its crc covers them
_CRC = struct.Struct(">I")

# LMDB 0.9 meta page (native byte order): page number at 0, flags at 10
# (P_META = 0x08), MDB_meta from 16 with mm_magic at 16 and mm_txnid at 144.
_NATIVE = "<" if sys.byteorder == "little" else ">"
_PGNO = struct.Struct(_NATIVE + "Q")
_META_FLAGS_AT, _META_MAGIC_AT, _META_TXNID_AT = 10, 16, 144
_LMDB_MAGIC = 0xBEEFC0DE
_P_META = 0x08

Op = tuple[str, bytes, bytes | None]
"""One LMDB write: (sub-DB name, key, value or None for a delete)."""

_OPS_ENCODER = msgspec.msgpack.Encoder()
_OPS_DECODER = msgspec.msgpack.Decoder(list[tuple[str, bytes, bytes | None]])


@dataclass(frozen=True, slots=True)
class Header:
    """The last sync point: LMDB's durable txn, the last frame it holds, its meta page."""

    generation: int
    txnid: int
    applied: int
    clean: bool
    page_size: int
    meta: bytes


class CommitLog:
    """``commit.log`` of one journal: frames after the last sync point, and its header."""

    def __init__(self, directory: Path, *, flush: bool = True) -> None:
        self.path = directory / LOG_FILE
        created = not self.path.exists()
        if created and flush:
            _preallocate(self.path, LOG_SIZE)
        elif created:
            # No flush policy (``sync=False``): nothing is promised past a process
            # crash, so a sparse file does; frames read back stop at its zeros.
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            os.ftruncate(fd, LOG_SIZE)
            os.close(fd)
        # The flush policy is this one flag: with it every frame write is durable on return.
        self._fd = os.open(self.path, os.O_RDWR | (os.O_DSYNC if flush else 0))
        _small_pages(self._fd, drop=True)
        self.size = os.fstat(self._fd).st_size
        self.offset = FRAMES_AT
        self.header = None if created else self.read_header()
        self.write_seconds = Histogram(SECONDS_BUCKETS)

    def close(self) -> None:
        """Close the file (the caller wrote the header it wants to leave)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # --- header ---------------------------------------------------------

    def read_header(self) -> Header | None:
        """The newest valid header slot, or None."""
        return read_header(self.path.parent)

    def write_header(
        self, txnid: int, applied: int, meta: bytes, page_size: int, *, clean: bool
    ) -> None:
        """Record a sync point (durable on return: the file is ``O_DSYNC``).

        The two slots alternate, so a torn write leaves the previous one whole.
        """
        generation = (self.header.generation if self.header else 0) + 1
        head = _HEADER.pack(
            _HEADER_MAGIC, _HEADER_VERSION, generation, txnid, applied, int(clean), page_size
        )
        meta = meta[:META_BYTES].ljust(META_BYTES, b"\0")
        body = head + meta
        os.pwrite(self._fd, body + struct.pack(">I", zlib.crc32(body)), (generation % 2) * SLOT)
        self.header = Header(generation, txnid, applied, clean, page_size, meta)

    # --- frames -----------------------------------------------------------

    def fits(self, frame: bytes) -> bool:
        """True when ``frame`` fits after the last one."""
        return self.offset + len(frame) <= self.size

    def append(self, frame: bytes) -> None:
        """Write one frame after the last (durable on return); grows the file if it must."""
        start = self.reserve(frame, grow=True)
        try:
            self.write_at(frame, start)
        except BaseException:
            self.offset = start  # nothing after it was written: the next frame goes here
            raise

    def reserve(self, frame: bytes, *, grow: bool = False) -> int:
        """Room for ``frame`` after the last frame reserved: its offset (not written yet).

        -1 when it does not fit (what :meth:`fits` says), unless ``grow``: then a
        frame larger than the file grows it. The writer reserves a frame while the
        one before it is still being written (``write.writer``, two frames in
        flight); the writes go to the file in the order of their reservations,
        each after the one before returned.
        """
        start = self.offset
        if start + len(frame) > self.size:
            if not grow:
                return -1
            if FRAMES_AT + len(frame) > self.size:
                _preallocate(self.path, FRAMES_AT + len(frame), extend_fd=self._fd)
                self.size = os.fstat(self._fd).st_size
        self.offset = start + len(frame)
        return start

    def write_at(self, frame: bytes, start: int) -> None:
        """Write ``frame`` at its reserved ``start``: durable on return (any thread)."""
        end = start + len(frame)
        data = frame
        if start % SLOT == 0 or start // SLOT != (end - 1) // SLOT:
            # The frame enters a page this round has not written: fill that page
            # to its end with zeros in the same write. A write that covers a
            # whole page needs no read of it first; a partial one into a page
            # the cache does not hold (the log is read and written uncached, see
            # _small_pages) waits for a read from the disk before its flush.
            data = frame + bytes(min(-end % SLOT, self.size - end))
        began = time.perf_counter()
        written = os.pwrite(self._fd, data, start)
        self.write_seconds.observe(time.perf_counter() - began)  # the O_DSYNC flush: the fsync
        if written != len(data):
            raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")

    def restart(self) -> None:
        """Write the next frame at the start (after a sync point holds everything before)."""
        self.offset = FRAMES_AT

    def frames(self, after: int) -> Iterator[tuple[int, list[Op]]]:
        """Frames ``after+1, after+2, …``, reading from the start of the log.

        Whole frames at or below ``after`` are skipped (LMDB holds them; frames
        of an older round of the log all have smaller numbers than any frame
        written since), and so are sync frames. Reading stops at the first
        torn, missing or out-of-order frame: nothing after it was acknowledged.
        """
        for kind, seq, payload in self._scan(after):
            if kind == _FRAME_MAGIC:
                try:
                    ops = _OPS_DECODER.decode(payload)
                except msgspec.DecodeError:
                    return
                yield seq, ops

    def sync_base(self) -> Header | None:
        """The newest durable sync point: the header's, or a later sync frame's.

        A sync frame counts only where it stands in the run of frames after
        the header (right after the frame it names as applied): one left from
        an older round of the log names an older frame and is passed over.
        """
        base = self.header
        if base is None:
            return None
        for kind, seq, payload in self._scan(base.applied):
            if kind == _SYNC_MAGIC and len(payload) >= _SYNC.size + META_BYTES:
                txnid, page_size = _SYNC.unpack_from(payload)
                meta = payload[_SYNC.size : _SYNC.size + META_BYTES]
                base = Header(base.generation, txnid, seq, False, page_size, meta)
        return base

    def _scan(self, after: int) -> Iterator[tuple[bytes, int, bytes]]:
        # (kind, seq or applied, payload) of the whole frames after ``after``,
        # in order: commit frames after+1, after+2, … and the sync frames that
        # stand between them (one naming frame n follows frame n).
        offset = FRAMES_AT
        expected = after + 1
        while offset + _FRAME.size <= self.size:
            front = os.pread(self._fd, _FRAME.size, offset)
            magic, seq, length, crc = _FRAME.unpack(front)
            if magic not in (_FRAME_MAGIC, _SYNC_MAGIC) or offset + _FRAME.size + length > self.size:
                return
            sync = magic == _SYNC_MAGIC
            if seq > (expected - 1 if sync else expected):
                return
            payload = os.pread(self._fd, length, offset + _FRAME.size)
            if len(payload) != length or zlib.crc32(payload, zlib.crc32(front[4:16])) != crc:
                return  # torn: never acknowledged
            offset += _FRAME.size + length
            if sync:
                if seq == expected - 1:
                    yield magic, seq, payload
                continue
            if seq < expected:
                continue
            yield magic, seq, payload
            expected += 1


def read_header(directory: Path) -> Header | None:
    """The header of ``directory``'s commit log without opening it for writing (None if none)."""
    try:
        fd = os.open(directory / LOG_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        _small_pages(fd)
        best: Header | None = None
        for slot in (0, 1):
            header = _parse_header(os.pread(fd, SLOT, slot * SLOT))
            if header is not None and (best is None or header.generation > best.generation):
                best = header
        return best
    finally:
        os.close(fd)


def encode_frame(seq: int, ops: list[Op]) -> bytes:
    """``magic ‖ u64 seq ‖ u32 len ‖ u32 crc32(seq ‖ len ‖ payload) ‖ payload``."""
    payload = _OPS_ENCODER.encode(ops)
    front = _SEQ_LEN.pack(seq, len(payload))
    crc = zlib.crc32(payload, zlib.crc32(front))
    return b"".join((_FRAME_MAGIC, front, _CRC.pack(crc), payload))


def encode_sync_frame(txnid: int, applied: int, meta: bytes, page_size: int) -> bytes:
    """``"PJCS" ‖ u64 applied ‖ u32 len ‖ u32 crc32(applied ‖ len ‖ payload) ‖ payload``.

    ``payload = u64 txnid ‖ u32 page_size ‖ meta`` (``META_BYTES``, zero-padded).
    """
    payload = _SYNC.pack(txnid, page_size) + meta[:META_BYTES].ljust(META_BYTES, b"\0")
    front = _U64.pack(applied) + struct.pack(">I", len(payload))
    return _SYNC_MAGIC + front + struct.pack(">I", zlib.crc32(payload, zlib.crc32(front))) + payload


def _parse_header(raw: bytes) -> Header | None:
    body_len = _HEADER.size + META_BYTES
    if len(raw) < body_len + 4:
        return None
    body = raw[:body_len]
    if struct.unpack_from(">I", raw, body_len)[0] != zlib.crc32(body):
        return None
    magic, version, generation, txnid, applied, clean, page_size = _HEADER.unpack_from(body)
    if magic != _HEADER_MAGIC or version not in _HEADER_VERSIONS:
        return None
    return Header(generation, txnid, applied, bool(clean), page_size, body[_HEADER.size :])


def _small_pages(fd: int, *, drop: bool = False) -> None:
    # Kernels with large page-cache folios (Linux 6.x) write back a whole folio
    # when one byte of it is dirty: a 2 KiB O_DSYNC frame write into a 1 MiB
    # folio sends 1 MiB to the disk. Folios come from large writes and from
    # readahead, so this file is written 4 KiB at a time and read without
    # readahead, and the writer drops whatever an earlier reader cached.
    with contextlib.suppress(OSError, AttributeError):
        if drop:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)


def _preallocate(path: Path, size: int, extend_fd: int | None = None) -> None:
    # Written zeros, not a sparse file or fallocate's unwritten extents: an
    # O_DSYNC write into them then changes no file metadata, so it costs one
    # flush. Written one 4 KiB page at a time: see _small_pages.
    fd = extend_fd if extend_fd is not None else os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        start = os.fstat(fd).st_size
        page = bytes(SLOT)  # one page of the file at a time
        for at in range(start, size, len(page)):
            os.pwrite(fd, page[: min(len(page), size - at)], at)
        os.fsync(fd)
        _small_pages(fd, drop=True)
    finally:
        if extend_fd is None:
            os.close(fd)
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- LMDB meta pages -------------------------------------------------------


def lmdb_meta(data_file: Path, page_size: int) -> tuple[int, bytes]:
    """``(txnid, first META_BYTES of its page)`` of the newer of LMDB's two meta pages."""
    best = (-1, b"")
    with open(data_file, "rb") as handle:
        for slot in (0, 1):
            handle.seek(slot * page_size)
            page = handle.read(META_BYTES)
            if len(page) < META_BYTES or not _is_meta(page):
                continue
            txnid = struct.unpack_from(_NATIVE + "Q", page, _META_TXNID_AT)[0]
            if txnid > best[0]:
                best = (txnid, page)
    return best


def restore_lmdb_meta(data_file: Path, page_size: int, meta: bytes) -> None:
    """Write ``meta`` over both meta pages of ``data_file``, so LMDB opens at its txn.

    The snapshot's pages are intact (the writer pinned it until the next sync
    point); only meta pages written after it may name pages that never reached
    the disk.
    """
    if not _is_meta(meta):
        raise ValueError("not an LMDB meta page")
    fd = os.open(data_file, os.O_RDWR)
    try:
        for slot in (0, 1):
            os.pwrite(fd, _PGNO.pack(slot) + meta[_PGNO.size :], slot * page_size)
        os.fsync(fd)
    finally:
        os.close(fd)


def _is_meta(page: bytes) -> bool:
    flags = struct.unpack_from(_NATIVE + "H", page, _META_FLAGS_AT)[0]
    magic = struct.unpack_from(_NATIVE + "I", page, _META_MAGIC_AT)[0]
    return bool(flags & _P_META) and magic == _LMDB_MAGIC


def lmdb_txnid(data_file: Path, page_size: int) -> int:
    """LMDB's newest txn id as its meta pages say (-1 when unreadable)."""
    return lmdb_meta(data_file, page_size)[0]
