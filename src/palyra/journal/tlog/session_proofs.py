"""A session's records with their inclusion proofs: an export that grows with the session.

``palyra.journal.session-proofs`` v1 (docs/journal/format.md, "Session proofs") is
NDJSON: a header, the signed checkpoint every proof is against, one line per
record of the session (the stored record and its inclusion proof), and an end
line with the count, the session's last record hash, the SHA-256 of every byte
before it and, when the exporter holds the key, a signature over all of that.
Unlike a session bundle it names nothing of other sessions: no line per position
of the whole journal. This module is the pure part (lines in, lines out; checks).
"""

from __future__ import annotations

import base64
import hashlib
import io
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import msgspec

from palyra.core.chain import GENESIS
from palyra.journal.format.signing import signature_valid
from palyra.journal.tlog.merkle import leaf_hash, verify_inclusion
from palyra.journal.tlog.note import (
    Checkpoint,
    NoteError,
    parse_checkpoint,
    parse_note,
    strict_b64decode,
)
from palyra.journal.tlog.note import verify_checkpoint as verify_note

FORMAT = "palyra.journal.session-proofs"
VERSION = 1
SEAL_TAG = b"palyra.journal.session-proofs.v1\x00"
_ENCODER = msgspec.json.Encoder(order="sorted")
_DECODER = msgspec.json.Decoder()
_FRONT_AT, _SESSION_AT = 122, 134  # format 2: u64 first, u32 count, then text(session)
_TOMB_AT = 105  # format 3: u64 first at 97, u32 count at 105, session text at 118


def line(obj: dict[str, Any]) -> bytes:
    """One NDJSON line (compact JSON, sorted keys)."""
    return _ENCODER.encode(obj) + b"\n"


def seal_message(session_id: str, checkpoint: Checkpoint, session_head: bytes, records: int,
                 lines_sha256: bytes) -> bytes:  # fmt: skip
    """What the end line's signature covers."""
    raw = session_id.encode()
    return (SEAL_TAG + len(raw).to_bytes(4, "big") + raw + checkpoint.size.to_bytes(8, "big")
            + checkpoint.root + session_head + records.to_bytes(8, "big") + lines_sha256)  # fmt: skip


def write_lines(
    session_id: str,
    note: bytes,
    records: Iterable[tuple[int, bytes, list[bytes]]],
    sign: Callable[[bytes], bytes] | None,
    public_key: bytes = b"",
) -> Iterator[bytes]:
    """The file's lines for ``records`` (``(index, stored record, inclusion proof)``)."""
    digest = hashlib.sha256()
    checkpoint = parse_checkpoint(parse_note(note).body)
    count, head = 0, GENESIS
    for obj in ({"type": "header", "format": FORMAT, "version": VERSION,
                 "session_id": session_id}, {"type": "checkpoint", "note": note.decode()}):  # fmt: skip
        data = line(obj)
        digest.update(data)
        yield data
    for index, record, proof in records:
        data = line({"type": "record", "index": index,
                     "record": base64.b64encode(record).decode(),
                     "proof": [base64.b64encode(h).decode() for h in proof]})  # fmt: skip
        digest.update(data)
        count, head = count + 1, record[1:33]
        yield data
    end: dict[str, Any] = {"type": "end", "records": count, "session_head": head.hex(),
                           "sha256": digest.hexdigest()}  # fmt: skip
    if sign is not None:
        end["public_key"] = public_key.hex()
        end["signature"] = sign(seal_message(session_id, checkpoint, head, count,
                                             digest.digest())).hex()  # fmt: skip
    yield line(end)


@dataclass(frozen=True, slots=True)
class SessionProven:
    """What a verified session-proofs file shows."""

    session_id: str
    records: int
    events: int
    checkpoint: Checkpoint
    sealed: bool


def _record_front(record: bytes, session_id: str) -> tuple[bytes, bytes, int, int]:
    """``(entry, prev_hash, first, last)`` of a stored record of this session, checked."""
    if len(record) > _SESSION_AT and record[0] == 0x02:
        if hashlib.sha256(record[65:]).digest() != record[1:33]:
            raise NoteError("a record does not hash to its record_hash")
        prev, first_at, session_at = record[90:122], _FRONT_AT, _SESSION_AT
    elif len(record) >= 122 and record[0] == 0x03:  # a tombstone: its hash as stated
        prev, first_at, session_at = record[65:97], 97, 118
    else:
        raise NoteError("a line holds neither a format 2 record nor a tombstone")
    first = int.from_bytes(record[first_at:first_at + 8], "big")
    count = int.from_bytes(record[first_at + 8:first_at + 12], "big")
    size = int.from_bytes(record[session_at:session_at + 4], "big")
    if record[session_at + 4:session_at + 4 + size].decode("utf-8", "replace") != session_id:
        raise NoteError("a record of another session")
    if count < 1:
        raise NoteError("a record of no event")
    return record[1:33], prev, first, first + count - 1


def verify_lines(data: bytes | BinaryIO, public_key: bytes | None) -> SessionProven:
    """Check a session-proofs file; with ``public_key``, the checkpoint and the seal too.

    ``data`` is the file's bytes or the open file, read a line at a time: memory
    holds one record line (at most :data:`MAX_LINE` bytes), whatever the session's size.
    Without a key only integrity is shown (anyone can recompute every hash and drop
    the newest records); with it, the checkpoint is the log's and the seal says
    nothing was cut off.

    Raises:
        NoteError: the first problem found (the message names the line).
    """
    source = io.BytesIO(data) if isinstance(data, bytes | bytearray) else data
    try:
        return _verify_lines(_read_lines(source), public_key)
    except NoteError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a line of the wrong shape
        raise NoteError(f"malformed session-proofs file ({exc!r})") from None


MAX_LINE = 4 * 1024 * 1024
"""A record line: one stored record (at most ~1 MiB of payload) in base64, and its proof."""


def _read_lines(source: BinaryIO) -> Iterator[bytes]:
    """Each line with its newline; a longer line or a missing final newline is refused."""
    while raw := source.readline(MAX_LINE + 1):
        if len(raw) > MAX_LINE:
            raise NoteError(f"a line is longer than {MAX_LINE} bytes")
        if not raw.endswith(b"\n"):
            raise NoteError("not a complete session-proofs file (no final newline)")
        yield raw


def _json(raw: bytes, number: int) -> dict[str, Any]:
    try:
        obj = _DECODER.decode(raw)
    except msgspec.DecodeError as exc:
        raise NoteError(f"line {number}: not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise NoteError(f"line {number}: not a JSON object")
    return obj


def _verify_lines(lines: Iterator[bytes], public_key: bytes | None) -> SessionProven:
    digest = hashlib.sha256()
    head = [next(lines, b""), next(lines, b"")]
    if not all(head):
        raise NoteError("not a complete session-proofs file")
    header, note_line = _json(head[0], 1), _json(head[1], 2)
    if header.get("format") != FORMAT or header.get("version") != VERSION:
        raise NoteError("line 1: not palyra.journal.session-proofs v1")
    session_id = header["session_id"]
    note = note_line.get("note", "").encode()
    if public_key is not None:
        _n, checkpoint = verify_note(note, None, public_key)
    else:
        checkpoint = parse_checkpoint(parse_note(note).body)
    for raw in head:
        digest.update(raw)
    walk = _RecordWalk(session_id, checkpoint)
    number, pending = 2, next(lines, b"")
    if not pending:
        raise NoteError("not a complete session-proofs file")
    for raw in lines:  # the line before the last is a record line; the last, the end line
        number += 1
        digest.update(pending)
        walk.record(_json(pending, number), number)
        pending = raw
    number += 1
    end = _json(pending, number)
    records = walk.records
    if end.get("type") != "end" or end.get("records") != records:
        raise NoteError(f"line {number}: the end line does not count {records} records")
    if end.get("session_head") != walk.prev_hash.hex() or end.get("sha256") != digest.hexdigest():
        raise NoteError(f"line {number}: session_head or sha256 does not match the lines")
    sealed = "signature" in end
    if public_key is not None:
        message = seal_message(session_id, checkpoint, walk.prev_hash, records, digest.digest())
        if not sealed or bytes.fromhex(end.get("public_key", "")) != public_key or not (
            signature_valid(public_key, message, bytes.fromhex(end["signature"]))
        ):
            raise NoteError(f"line {number}: no valid seal by the key (records may have "
                            "been cut off)")  # fmt: skip
    return SessionProven(session_id, records, walk.events, checkpoint, sealed)


class _RecordWalk:
    """The record lines so far: each links to the previous and is proven in the tree."""

    def __init__(self, session_id: str, checkpoint: Checkpoint) -> None:
        self.session_id, self.checkpoint = session_id, checkpoint
        self.prev_hash, self.last_position, self.last_index = GENESIS, 0, -1
        self.records = self.events = 0

    def record(self, obj: dict[str, Any], number: int) -> None:
        if obj.get("type") != "record":
            raise NoteError(f"line {number}: not a record line")
        record = strict_b64decode(obj["record"], f"line {number}: record")
        entry, prev, first, last = _record_front(record, self.session_id)
        index = obj["index"]
        if prev != self.prev_hash:
            raise NoteError(f"line {number}: prev_hash does not link to the session's previous "
                            "record (a record was left out or changed)")  # fmt: skip
        if first <= self.last_position or index <= self.last_index:
            raise NoteError(f"line {number}: records out of order")
        proof = [strict_b64decode(h, f"line {number}: proof hash") for h in obj["proof"]]
        checkpoint = self.checkpoint
        if not verify_inclusion(index, checkpoint.size, leaf_hash(entry), proof, checkpoint.root):
            raise NoteError(f"line {number}: the inclusion proof of entry {index} does not lead "
                            "to the checkpoint's root")  # fmt: skip
        self.prev_hash, self.last_position, self.last_index = entry, last, index
        self.records += 1
        self.events += last - first + 1 if record[0] == 0x02 else 0
