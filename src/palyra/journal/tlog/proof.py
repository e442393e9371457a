"""The self-contained proof of one journal record: C2SP ``tlog-proof``; pure.

```
c2sp.org/tlog-proof@v1
extra <base64 of the stored record, format 2>
index <entry index>
<base64 hash>            (the inclusion proof, leaf's sibling first)
...
                         (empty line)
<the signed checkpoint, verbatim>
```

The entry is the record's ``record_hash``; the record itself travels in
``extra`` so a verifier recomputes that hash from its bytes (SHA-256 of bytes
65..end must equal bytes 1..33) and then the leaf, the root and the signature.
Nothing in ``extra`` is trusted before that recomputation matches.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from dataclasses import dataclass
from hashlib import sha256

from palyra.journal.tlog.merkle import HASH_SIZE, leaf_hash, verify_inclusion
from palyra.journal.tlog.note import (
    Checkpoint,
    Note,
    NoteError,
    Witness,
    parse_note,
    strict_b64decode,
    valid_cosignature,
    verify_checkpoint,
)

PROOF_HEADER = b"c2sp.org/tlog-proof@v1"
RECORD_FORMAT = 0x02
_HASH_AT, _GLOBAL_AT, _HASHED_AT = 1, 33, 65
MAX_PROOF_BYTES = 4 * 1024 * 1024
"""A proof file is read whole: a record is at most ~1 MiB of payload, base64'd."""


def encode_proof(record: bytes, index: int, path: Iterable[bytes], checkpoint: bytes) -> bytes:
    """The ``tlog-proof`` text for ``record`` (entry ``index``) under ``checkpoint``."""
    lines = [PROOF_HEADER, b"extra " + base64.b64encode(record), b"index %d" % index]
    lines += [base64.b64encode(h) for h in path]
    return b"\n".join(lines) + b"\n\n" + checkpoint


def record_entry(record: bytes) -> bytes:
    """The tree entry of a stored format 2 record: its ``record_hash``, recomputed.

    Raises:
        NoteError: not a format 2 record, or its bytes do not hash to the hash it states.
    """
    if len(record) <= _HASHED_AT or record[0] != RECORD_FORMAT:
        raise NoteError("the proven entry is not a format 2 record")
    stated = record[_HASH_AT:_GLOBAL_AT]
    if sha256(record[_HASHED_AT:]).digest() != stated:
        raise NoteError("the record's bytes do not hash to its record_hash")
    return stated


@dataclass(frozen=True, slots=True)
class Proven:
    """What a verified proof shows: the record, where it is and which checkpoint holds it."""

    record: bytes
    index: int
    checkpoint: Checkpoint
    witnesses: tuple[str, ...]


def verify_proof(
    text: bytes,
    public_key: bytes,
    origin: str | None = None,
    witnesses: Iterable[Witness] = (),
    quorum: int = 0,
) -> Proven:
    """Check a ``tlog-proof`` offline: record hash, inclusion, the log's signature, witnesses.

    Raises:
        NoteError: any check fails (the message says which).
    """
    if len(text) > MAX_PROOF_BYTES:
        raise NoteError(f"proof is larger than {MAX_PROOF_BYTES} bytes")
    head, sep, checkpoint_text = text.partition(b"\n\n")
    if not sep:
        raise NoteError("proof has no empty line before its checkpoint")
    lines = head.split(b"\n")
    if lines[0] != PROOF_HEADER:
        raise NoteError("proof does not start with c2sp.org/tlog-proof@v1")
    at = 1
    extra = b""
    if at < len(lines) and lines[at].startswith(b"extra "):
        extra = _b64(lines[at][6:], "extra")
        at += 1
    if at >= len(lines) or not lines[at].startswith(b"index "):
        raise NoteError("proof has no index line")
    index = _decimal(lines[at][6:])
    path = [_b64(line, "proof hash") for line in lines[at + 1 :]]
    if any(len(h) != HASH_SIZE for h in path):
        raise NoteError("a proof hash is not 32 bytes")
    note, checkpoint = verify_checkpoint(checkpoint_text, origin, public_key)
    entry = record_entry(extra)
    if not verify_inclusion(index, checkpoint.size, leaf_hash(entry), path, checkpoint.root):
        raise NoteError(f"the inclusion proof of entry {index} does not lead to the checkpoint's "
                        f"root at size {checkpoint.size}")  # fmt: skip
    cosigned = _cosigners(note, witnesses)
    if len(cosigned) < quorum:
        raise NoteError(f"{len(cosigned)} valid witness cosignature(s), {quorum} required")
    return Proven(extra, index, checkpoint, cosigned)


def _cosigners(note: Note, witnesses: Iterable[Witness]) -> tuple[str, ...]:
    named = {w.name: w for w in witnesses}
    return tuple(sorted({s.name for s in note.signatures
                         if s.name in named and valid_cosignature(s, note.body, named[s.name])}))  # fmt: skip


def _b64(raw: bytes, what: str) -> bytes:
    return strict_b64decode(raw, f"proof {what}")


def _decimal(raw: bytes) -> int:
    if not raw.isdigit() or (raw.startswith(b"0") and raw != b"0"):
        raise NoteError("proof index is not a decimal without leading zeros")
    return int(raw)


def parse_consistency(text: bytes) -> list[bytes]:
    """A consistency proof as served: one base64 hash per line."""
    return [_b64(line, "consistency hash") for line in text.split(b"\n") if line]


__all__ = ["NoteError", "Proven", "encode_proof", "parse_consistency", "parse_note",
           "record_entry", "verify_proof"]  # fmt: skip
