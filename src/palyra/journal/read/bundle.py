"""Export of a self-contained, verifiable NDJSON bundle (see ``format.bundle_format``)."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from palyra.core.chain import GENESIS, seal_message
from palyra.core.event_header import header_values
from palyra.journal import _env as names
from palyra.journal._store import JournalStore
from palyra.journal._types import JournalConfig, StoredEvent
from palyra.journal.format.bundle_format import (
    BUNDLE_FORMAT,
    BUNDLE_VERSION,
    CheckpointLine,
    EventLine,
    HeaderLine,
    Line,
    LinkLine,
    PrunedLine,
    SealLine,
    TrailerLine,
    encode_line,
)
from palyra.journal.format.record import CheckpointRecord, decode_checkpoint, decode_record
from palyra.journal.format.signing import Signer


@dataclass(frozen=True, slots=True)
class BundleSummary:
    """What an export wrote."""

    path: Path
    events: int
    links: int
    checkpoints: int
    head_position: int
    head_hash: str


def export_bundle(
    source: Path | JournalStore,
    out: Path,
    *,
    session_id: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> BundleSummary:
    """Write a bundle of the whole journal, or of one session, to ``out`` (mode 0600).

    A session bundle carries that session's events in full and, for every
    other position, only its event hash and link hash, so the global chain
    and every checkpoint still verify while other sessions' content stays out.
    When the data dir's signing key is readable, the bundle ends with a seal:
    the exporter's signature over its head (and, for a session bundle, over
    the session's last event hash and event count), which a verifier with the
    public key requires — it proves nothing was cut off or turned into links.
    The file is written under a temporary name and renamed when complete.
    ``progress``, if given, is called with each position once written.
    """
    store = (
        source
        if isinstance(source, JournalStore)
        else JournalStore.open(Path(source), config=JournalConfig(readonly=True))
    )
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            summary = _write(store, handle, session_id, out, progress,
                             Signer.load(store.env.path))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        if store is not source:
            store.close()
    return summary


class _Writer:
    """Writes bundle lines, hashing each, and tallies what the trailer and seal report."""

    def __init__(self, handle: BinaryIO, session_id: str | None) -> None:
        self.handle = handle
        self.digest = hashlib.sha256()
        self.session_id = session_id
        self.events = self.links = self.checkpoints = 0
        # The last record written: its first and last positions and its link hash.
        self.first = self.position = 0
        self.head, self.session_head = GENESIS, GENESIS

    def emit(self, line: Line) -> None:
        data = encode_line(line)
        self.digest.update(data)
        self.handle.write(data)

    def emit_checkpoints(self, pending: list[CheckpointRecord], upto: int) -> None:
        """The checkpoints (sorted by position) taken at or before ``upto``."""
        while pending and pending[0].position <= upto:
            self.emit(_checkpoint_line(pending.pop(0)))
            self.checkpoints += 1

    def emit_record(self, value: bytes) -> None:
        """One stored record as lines: a bundle speaks in events, one line per position,
        each carrying its record's hashes, whatever the record holds."""
        record = decode_record(value)
        own = self.session_id is None or record.session_id == self.session_id
        if record.pruned and own:
            self.emit(PrunedLine(position=record.first, last=record.last,
                                 session_id=record.session_id,
                                 prev_hash=record.prev_hash.hex(), hash=record.hash.hex(),
                                 global_hash=record.global_hash.hex()))
            self.session_head = record.hash
        elif own:
            for event in record.events():
                self.emit(_event_line(event))
            self.events += record.last - record.first + 1
            self.session_head = record.hash
        else:
            digest, link = record.hash.hex(), record.global_hash.hex()
            for at in range(record.first, record.last + 1):
                self.emit(LinkLine(position=at, hash=digest, global_hash=link))
            self.links += record.last - record.first + 1
        self.first, self.position, self.head = record.first, record.last, record.global_hash

    def trailer(self) -> TrailerLine:
        """The closing line: the tallies, the head and the digest of every line before it."""
        return TrailerLine(
            events=self.events,
            links=self.links,
            checkpoints=self.checkpoints,
            head_position=self.position,
            head_hash=self.head.hex(),
            session_head=self.session_head.hex() if self.session_id is not None else "",
            sha256=self.digest.hexdigest(),
        )


def _write(
    store: JournalStore,
    handle: BinaryIO,
    session_id: str | None,
    out: Path,
    progress: Callable[[int], None] | None = None,
    signer: Signer | None = None,
) -> BundleSummary:
    env = store.env
    writer = _Writer(handle, session_id)
    # One read txn: events and checkpoints come from the same snapshot.
    with env.read() as txn:
        writer.emit(
            HeaderLine(
                format=BUNDLE_FORMAT,
                version=BUNDLE_VERSION,
                scope="full" if session_id is None else "session",
                session_id=session_id or "",
                hash="sha256",
                exported_at_ms=time.time_ns() // 1_000_000,
            )
        )
        pending = sorted(
            (decode_checkpoint(v) for _k, v in txn.cursor(db=env.dbs[names.CHECKPOINTS])),
            key=lambda c: (c.position, c.ts_ms),
        )
        writer.emit_checkpoints(pending, 0)
        for _key, value in txn.cursor(db=env.dbs[names.EVENTS]):
            writer.emit_record(value)
            writer.emit_checkpoints(pending, writer.position)
            if progress is not None:
                for at in range(writer.first, writer.position + 1):
                    progress(at)
    if signer is not None:
        writer.emit(_seal(signer, session_id, writer.position, writer.head, writer.session_head,
                          writer.events, writer.digest.digest()))
    writer.handle.write(encode_line(writer.trailer()))
    return BundleSummary(out, writer.events, writer.links, writer.checkpoints, writer.position,
                         writer.head.hex())


def _seal(signer: Signer, session_id: str | None, position: int, head: bytes,
          session_head: bytes, events: int, lines_sha256: bytes) -> SealLine:
    scope = "full" if session_id is None else "session"
    own_head = session_head if session_id is not None else GENESIS
    own_events = events if session_id is not None else 0
    ts_ms = time.time_ns() // 1_000_000
    message = seal_message(scope, session_id or "", position, head, own_head, own_events, ts_ms,
                           lines_sha256)
    return SealLine(head_position=position, head_hash=head.hex(), session_head=own_head.hex(),
                    session_events=own_events, ts_ms=ts_ms, public_key=signer.public_key.hex(),
                    signature=signer.sign(message).hex(), sha256=lines_sha256.hex())


def _event_line(event: StoredEvent) -> EventLine:
    return EventLine(
        *header_values(event),
        payload=event.payload,
        redactions=event.redactions,
        prev_hash=event.prev_hash,
        hash=event.hash,
        global_hash=event.global_hash,
    )


def _checkpoint_line(record: CheckpointRecord) -> CheckpointLine:
    return CheckpointLine(
        position=record.position,
        head_hash=record.head.hex(),
        ts_ms=record.ts_ms,
        public_key=record.public_key.hex(),
        signature=record.signature.hex(),
    )
