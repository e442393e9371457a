"""A bundle's event and link lines, grouped back into the journal records they came from.

A bundle speaks in events: one line per position. A record's events all carry
the record's ``hash`` and ``global_hash``, so a record is a maximal run of
consecutive lines of one kind (event or link) with the same pair of hashes.
A run of event lines is hashed as a format 2 record rebuilt from the lines; a
single event line that does not match is tried as a format 1 event (journals
written before format 2). In a version 1 bundle every line is its own format 1
record. A run of link lines takes one step of the global chain.
"""

from __future__ import annotations

from collections.abc import Callable

from palyra.core.canonical import canonical_bytes, normalize
from palyra.core.chain import record_body, record_hash, record_head, record_row
from palyra.core.errors import InvalidArgument
from palyra.core.event_header import header_values
from palyra.journal.format.bundle_format import EventLine, LinkLine, parse_hash
from palyra.journal.format.record import PRUNED_KIND, RECORD_VERSION, RETENTION_SESSION, EventRecord
from palyra.journal.verify.chainwalk import ChainVerifier, Tampered


def line_hash(text: str, position: int) -> bytes:
    """32 bytes from a line's hex hash, or :class:`Tampered` at ``position``."""
    try:
        return parse_hash(text)
    except ValueError as exc:
        raise Tampered(position, str(exc)) from exc


def payload_bytes(line: EventLine) -> bytes:
    """The canonical payload bytes of an event line, or :class:`Tampered`."""
    try:
        return canonical_bytes(normalize(line.payload))
    except InvalidArgument as exc:
        raise Tampered(line.position, f"payload is not canonical ({exc.message})") from exc


def legacy_record(line: EventLine) -> EventRecord:
    """The format 1 record an event line stands for."""
    position = line.position
    return EventRecord(
        *header_values(line),
        v=RECORD_VERSION,
        payload=payload_bytes(line),
        redactions=line.redactions,
        prev_hash=line_hash(line.prev_hash, position),
        hash=line_hash(line.hash, position),
        global_hash=line_hash(line.global_hash, position),
    )


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

    def add(self, line: EventLine | LinkLine) -> None:
        """Take the next event or link line; a line of another record closes the current one."""
        lines = self._lines
        if lines and (
            self._legacy_only
            or type(line) is not type(lines[0])
            or line.hash != lines[0].hash
            or line.global_hash != lines[0].global_hash
        ):
            self.flush()
        self._lines.append(line)

    def flush(self) -> None:
        """Check the record collected so far (before a checkpoint, the trailer, or a new record)."""
        lines, self._lines = self._lines, []
        if not lines:
            return
        verifier = self._verifier
        first = lines[0].position
        verifier.check_next(first)
        for offset, line in enumerate(lines):
            expected = first + offset
            if line.position < expected:
                raise Tampered(expected, f"entry for position {line.position} is out of order")
            if line.position > expected:
                raise Tampered(
                    expected, f"position missing (next entry has position {line.position})"
                )
        last = first + len(lines) - 1
        digest = line_hash(lines[0].hash, first)
        global_hash = line_hash(lines[0].global_hash, first)
        if isinstance(lines[0], LinkLine):
            verifier.link(first, last, digest, global_hash)
        else:
            self._events(
                [line for line in lines if isinstance(line, EventLine)], digest, global_hash
            )
        if self._progress is not None:
            for position in range(first, last + 1):
                self._progress(position)

    def _events(self, lines: list[EventLine], claimed: bytes, global_hash: bytes) -> None:
        verifier = self._verifier
        head_line = lines[0]
        first, last = head_line.position, lines[-1].position
        if self._legacy_only:
            verifier.event(legacy_record(head_line))
            return
        session_id, prev_text = head_line.session_id, head_line.prev_hash
        for line in lines:
            if line.session_id != session_id or line.prev_hash != prev_text:
                raise Tampered(first, "events of one record disagree on session or prev_hash")
        prev = line_hash(prev_text, first)
        rows = [
            record_row(line, line.tape_seq, line.redactions, payload_bytes(line)) for line in lines
        ]
        digest = record_hash(record_head(prev, first, len(lines), session_id), record_body(rows))
        if digest != claimed and len(lines) == 1:
            verifier.event(legacy_record(head_line))  # a format 1 event, or a tampered one
            return
        verifier.record(first, last, session_id, prev, digest, claimed, global_hash)
        if session_id == RETENTION_SESSION:
            for line in lines:
                if line.kind == PRUNED_KIND:
                    verifier.claimed(line.position, line.payload)
