"""The digest of a span of tape events (pure): what a compaction says it replaced.

A ``session_compaction`` tape event names the tape seqs it covers and a digest
of those events as stored. The engine computes it when it compacts, and the
journal verifier recomputes it from the stored events, so a summary can always
be tied to exactly the events it stands for (docs/journal/format.md, "Compaction
digests")::

    digest = SHA-256( TAPE_DIGEST_TAG ‖ for each covered event, in tape-seq order:
                      i64(tape_seq) ‖ text(kind) ‖ blob(canonical redacted payload) )

with ``text``/``blob`` a u32 big-endian length then the bytes (as in the chain
hashes) and the payload bytes those of :func:`palyra.core.canonical.canonical_bytes`
(the payload the journal stores and hashes: redacted).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping
from typing import Any

from palyra.core.canonical import canonical_bytes

TAPE_DIGEST_TAG = b"palyra.tape.digest.v1\x00"

_U32 = struct.Struct(">I").pack
_I64 = struct.Struct(">q").pack


class TapeDigest:
    """Incremental digest: feed the covered events in tape-seq order."""

    __slots__ = ("_hash", "count", "next_seq")

    def __init__(self) -> None:
        self._hash = hashlib.sha256(TAPE_DIGEST_TAG)
        self.count = 0
        self.next_seq: int | None = None

    def add(self, tape_seq: int, kind: str, payload: Mapping[str, Any]) -> None:
        """Add one stored event (its redacted payload, as the journal holds it)."""
        raw_kind = kind.encode("utf-8")
        body = canonical_bytes(payload)
        self._hash.update(_I64(tape_seq) + _U32(len(raw_kind)) + raw_kind + _U32(len(body))
                          + body)
        self.count += 1
        self.next_seq = tape_seq + 1

    def hexdigest(self) -> str:
        """The lowercase hex digest of the events added so far."""
        return self._hash.hexdigest()


def tape_digest(events: Iterable[tuple[int, str, Mapping[str, Any]]]) -> str:
    """The hex digest of ``(tape_seq, kind, payload)`` triples, in the order given."""
    digest = TapeDigest()
    for seq, kind, payload in events:
        digest.add(seq, kind, payload)
    return digest.hexdigest()
