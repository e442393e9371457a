"""A bundle's event and link lines, grouped back into the journal records they came from.

A bundle speaks in events: one line per position. A record's events all carry
the record's ``hash`` and ``global_hash``, so a record is a maximal run of
consecutive lines of one kind (event or link) with the same pair of hashes.
A run of event lines is hashed as a format 2 record rebuilt from the lines; a
single event line that does not match is tried as a format 1 event (journals
written before format 2). In a version 1 bundle every line is its own format 1
record. A run of link lines takes one step of the global chain.

Each line comes with its number in the file, so a failure names the line
(``line N (event)``), the field and what was expected.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from palyra.core.canonical import canonical_bytes, normalize
from palyra.core.chain import event_hash, record_body, record_hash, record_head, record_row
from palyra.core.errors import InvalidArgument
from palyra.core.event_header import header_values
from palyra.journal.format.bundle_format import EventLine, LinkLine, parse_hash
from palyra.journal.format.record import PRUNED_KIND, RECORD_VERSION, RETENTION_SESSION, EventRecord
from palyra.journal.verify.chainwalk import ChainVerifier, Tampered, out_of_order


def line_hash(text: str, position: int, where: str, field: str) -> bytes:
    """32 bytes from a line's hex hash ``field``, or :class:`Tampered` at ``position``."""
    try:
        return parse_hash(text)
    except ValueError as exc:
        raise Tampered(position, f"{where}: {field} is {text!r}, expected 64 lowercase hex "
                                 "digits") from exc


def payload_bytes(line: EventLine, where: str) -> bytes:
    """The canonical payload bytes of an event line, or :class:`Tampered`."""
    try:
        return canonical_bytes(normalize(line.payload))
    except InvalidArgument as exc:
        raise Tampered(line.position, f"{where}: payload is not canonical ({exc.message}), "
                                      "expected a payload the journal could have "
                                      "written") from exc


def legacy_record(line: EventLine, where: str) -> EventRecord:
    """The format 1 record an event line stands for."""
    position = line.position
    return EventRecord(
        *header_values(line),
        v=RECORD_VERSION,
        payload=payload_bytes(line, where),
        redactions=line.redactions,
        prev_hash=line_hash(line.prev_hash, position, where, "prev_hash"),
        hash=line_hash(line.hash, position, where, "hash"),
        global_hash=line_hash(line.global_hash, position, where, "global_hash"),
    )


def format1_hash(record: EventRecord) -> bytes | None:
    """The hash a format 1 event's content gives (None: an int its pre-image cannot hold)."""
    try:
        return event_hash(record.prev_hash, record, record.redactions, record.payload)
    except (struct.error, OverflowError):
        return None


def lines_at(numbers: list[int], kind: str) -> str:
    """``line 7 (event)`` or ``lines 7..9 (events of one record)``."""
    if len(numbers) == 1:
        return f"line {numbers[0]} ({kind})"
    return f"lines {numbers[0]}..{numbers[-1]} ({kind}s of one record)"


class LineGroups:
    """Collects consecutive lines of one record and checks it when the record ends."""

    def __init__(
        self,
        verifier: ChainVerifier,
        *,
        legacy_only: bool,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        self._verifier = verifier
        self._legacy_only = legacy_only
        self._progress = progress
        self._lines: list[EventLine | LinkLine] = []
        self._numbers: list[int] = []  # each collected line's number in the file

    def add(self, line: EventLine | LinkLine, number: int) -> None:
        """Take the next event or link line (line ``number`` of the file); a line of another
        record closes the current one."""
        lines = self._lines
        if lines and (
            self._legacy_only
            or type(line) is not type(lines[0])
            or line.hash != lines[0].hash
            or line.global_hash != lines[0].global_hash
        ):
            self.flush()
        self._lines.append(line)
        self._numbers.append(number)

    def flush(self) -> None:
        """Check the record collected so far (before a checkpoint, the trailer, or a new record)."""
        lines, self._lines = self._lines, []
        numbers, self._numbers = self._numbers, []
        if not lines:
            return
        verifier = self._verifier
        kind = "link" if isinstance(lines[0], LinkLine) else "event"
        first = lines[0].position
        verifier.check_next(first, f"line {numbers[0]} ({kind})")
        for offset, line in enumerate(lines):
            expected = first + offset
            where = f"line {numbers[offset]} ({kind})"
            if line.position < expected:
                raise Tampered(expected, out_of_order(where, line.position, expected))
            if line.position > expected:
                raise Tampered(expected, f"{where}: position is {line.position}, expected "
                                         f"{expected} (position {expected} is missing)")
        last = first + len(lines) - 1
        where = lines_at(numbers, kind)
        digest = line_hash(lines[0].hash, first, where, "hash")
        global_hash = line_hash(lines[0].global_hash, first, where, "global_hash")
        if isinstance(lines[0], LinkLine):
            verifier.link(first, last, digest, global_hash, where)
        else:
            self._events([line for line in lines if isinstance(line, EventLine)], numbers,
                         digest, global_hash)
        if self._progress is not None:
            for position in range(first, last + 1):
                self._progress(position)

    def _events(self, lines: list[EventLine], numbers: list[int], claimed: bytes,
                global_hash: bytes) -> None:  # fmt: skip
        verifier = self._verifier
        head_line = lines[0]
        first, last = head_line.position, lines[-1].position
        where = lines_at(numbers, "event")
        if self._legacy_only:
            verifier.event(legacy_record(head_line, where), where)
            return
        session_id, prev_text = head_line.session_id, head_line.prev_hash
        for line, number in zip(lines, numbers, strict=True):
            for field, got, want in (("session_id", line.session_id, session_id),
                                     ("prev_hash", line.prev_hash, prev_text)):
                if got != want:
                    raise Tampered(first, f"line {number} (event): {field} is {got!r}, "
                                          f"expected {want!r} (line {numbers[0]}'s: the events "
                                          "of one record share its session and prev_hash)")
        prev = line_hash(prev_text, first, where, "prev_hash")
        rows = [
            record_row(line, line.tape_seq, line.redactions,
                       payload_bytes(line, f"line {number} (event)"))
            for line, number in zip(lines, numbers, strict=True)
        ]
        digest = record_hash(record_head(prev, first, len(lines), session_id), record_body(rows))
        if digest != claimed and len(lines) == 1:
            legacy = legacy_record(head_line, where)
            if format1_hash(legacy) == claimed:  # a format 1 event of an older journal
                verifier.event(legacy, where)
                return
            # A tampered line: named against the format 2 record it claims to be part of.
        verifier.record(first, last, session_id, prev, digest, claimed, global_hash, where)
        if session_id == RETENTION_SESSION:
            for line, number in zip(lines, numbers, strict=True):
                if line.kind == PRUNED_KIND:
                    verifier.claimed(line.position, line.payload, f"line {number} (event)")
