"""C2SP ``signed-note``, ``tlog-checkpoint`` and ``tlog-cosignature`` (Ed25519); pure.

A checkpoint is the note body ``<origin>\\n<size>\\n<base64 root>\\n``; each
signature is a line ``— <key name> <base64(key id ‖ signature)>`` after a blank
line. The log signs the body with its key under the name ``origin`` (key id:
``SHA-256(name ‖ 0x0A ‖ 0x01 ‖ public key)[:4]``); a witness cosigns
``cosignature/v1\\ntime <t>\\n`` followed by the body (key id type byte 0x04,
signature ``u64 t ‖ Ed25519 signature``). docs/journal/format.md has the rules.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from hashlib import sha256
from typing import Any

from palyra.journal.format.signing import signature_valid

ED25519_TYPE = 0x01
COSIGNATURE_TYPE = 0x04
_DASH = "\u2014 "
_U64 = struct.Struct(">Q")
MAX_NOTE_BYTES = 16 * 1024
"""A note, with every signature, never grows past this (memory stays bounded)."""


class NoteError(ValueError):
    """A note, checkpoint or signature line that does not follow the formats."""


def strict_b64decode(text: str | bytes, what: str) -> bytes:
    """Decode standard padded base64, refusing any text but the one canonical spelling.

    Python's decoder ignores the unused low bits of a final character, so four
    spellings of one hash would all verify; a proof or signature must have one.

    Raises:
        NoteError: when ``text`` is not the canonical base64 of some bytes.
    """
    raw_text = text.encode() if isinstance(text, str) else bytes(text)
    try:
        raw = base64.b64decode(raw_text, validate=True)
    except binascii.Error as exc:
        raise NoteError(f"{what} is not base64") from exc
    if base64.b64encode(raw) != raw_text:
        raise NoteError(f"{what} is not canonical base64")
    return raw


def key_id(name: str, public_key: bytes, kind: int = ED25519_TYPE) -> bytes:
    """The 4-byte key id of ``signed-note``: ``SHA-256(name ‖ 0x0A ‖ kind ‖ key)[:4]``."""
    return sha256(name.encode() + b"\n" + bytes((kind,)) + public_key).digest()[:4]


def default_origin(public_key: bytes) -> str:
    """A new log's origin line unless configured: names the key, so two data dirs never
    share one. Short, since a proof carries it twice (checkpoint and signature line)."""
    return "palyra.local/" + sha256(public_key).hexdigest()[:16]


def checkpoint_body(origin: str, size: int, root: bytes) -> bytes:
    """The ``tlog-checkpoint`` note text (no extension lines)."""
    return f"{origin}\n{size}\n{base64.b64encode(root).decode()}\n".encode()


def check_name(name: str) -> str:
    """``name`` if it can be a key name / origin (non-empty, no space, no '+', printable)."""
    if not name or any(c in name for c in " +\n") or not name.isprintable():
        raise NoteError(f"{name!r} cannot be a key name (non-empty, no spaces or '+')")
    return name


def signature_line(name: str, key: bytes, signature: bytes) -> bytes:
    """One note signature line for key id ``key`` (4 bytes) and ``signature``."""
    return f"{_DASH}{name} {base64.b64encode(key + signature).decode()}\n".encode()


def sign_checkpoint(
    origin: str, size: int, root: bytes, public_key: bytes, sign: Callable[[bytes], bytes]
) -> bytes:
    """The checkpoint signed by the log: body, blank line, one signature line."""
    body = checkpoint_body(check_name(origin), size, root)
    return body + b"\n" + signature_line(origin, key_id(origin, public_key), sign(body))


@dataclass(frozen=True, slots=True)
class Signature:
    """One parsed signature line."""

    name: str
    key_id: bytes
    signature: bytes
    line: bytes


@dataclass(frozen=True, slots=True)
class Note:
    """A parsed signed note: its body (with final newline) and signature lines."""

    body: bytes
    signatures: tuple[Signature, ...]

    def text(self) -> bytes:
        """The note as served: body, blank line, signature lines."""
        return self.body + b"\n" + b"".join(s.line for s in self.signatures)


def parse_note(text: bytes) -> Note:
    """Split ``text`` into body and signature lines.

    Raises:
        NoteError: not a signed note.
    """
    if len(text) > MAX_NOTE_BYTES:
        raise NoteError(f"note is longer than {MAX_NOTE_BYTES} bytes")
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NoteError("note is not UTF-8") from exc
    if not decoded.endswith("\n") or any(
        (c < " " and c != "\n") or c == "\x7f" for c in decoded
    ):
        raise NoteError("note must end in a newline and hold no control characters")
    split = decoded.rfind("\n\n")
    if split < 0:
        raise NoteError("note has no blank line before its signatures")
    body = decoded[: split + 1]
    lines = decoded[split + 2 :].splitlines(keepends=True)
    if not lines:
        raise NoteError("note has no signature")
    signatures = []
    for line in lines:
        if not line.startswith(_DASH):
            raise NoteError(f"signature line {line.strip()!r} does not start with '— '")
        fields = line[len(_DASH) :].rstrip("\n").split(" ")
        if len(fields) != 2:
            raise NoteError(f"signature line {line.strip()!r} is not '— <name> <base64>'")
        raw = strict_b64decode(fields[1], f"signature line {line.strip()!r}")
        if len(raw) < 5:
            raise NoteError(f"signature line {line.strip()!r} is too short")
        signatures.append(Signature(fields[0], raw[:4], raw[4:], line.encode()))
    return Note(body.encode(), tuple(signatures))


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A checkpoint's three mandatory lines (extension lines are kept in ``body``)."""

    origin: str
    size: int
    root: bytes
    body: bytes


def parse_checkpoint(body: bytes) -> Checkpoint:
    """The origin, size and root of a checkpoint body.

    Raises:
        NoteError: the body is not a checkpoint.
    """
    lines = body.decode("utf-8", "replace").split("\n")
    if len(lines) < 4 or not lines[0]:
        raise NoteError("checkpoint body needs an origin, a size and a root line")
    size_text = lines[1]
    if not size_text.isascii() or not size_text.isdigit() or (
        size_text.startswith("0") and size_text != "0"
    ):
        raise NoteError(f"checkpoint size {size_text!r} is not a decimal without leading zeros")
    root = strict_b64decode(lines[2], "checkpoint root")
    if len(root) != 32:
        raise NoteError("checkpoint root is not the base64 of 32 bytes")
    return Checkpoint(lines[0], int(size_text), root, body)


def verify_checkpoint(text: bytes, origin: str | None, public_key: bytes) -> tuple[Note, Checkpoint]:
    """Parse ``text`` and check the log's signature by ``public_key``.

    The key name is the checkpoint's origin (``origin``, when given, must match).

    Raises:
        NoteError: malformed, another origin, or no valid signature by the key.
    """
    note = parse_note(text)
    checkpoint = parse_checkpoint(note.body)
    if origin is not None and checkpoint.origin != origin:
        raise NoteError(f"checkpoint origin is {checkpoint.origin!r}, expected {origin!r}")
    want = key_id(checkpoint.origin, public_key)
    for sig in note.signatures:
        if sig.name == checkpoint.origin and sig.key_id == want:
            if len(sig.signature) == 64 and signature_valid(public_key, note.body, sig.signature):
                return note, checkpoint
            raise NoteError("the log's signature on the checkpoint is invalid")
    raise NoteError(f"the checkpoint carries no signature by the key of {checkpoint.origin!r}")


@dataclass(frozen=True, slots=True)
class Witness:
    """A configured witness: its key name and Ed25519 public key."""

    name: str
    public_key: bytes


def parse_witness(spec: str) -> Witness:
    """``"<key name>=<64 hex digits>"`` as a :class:`Witness`.

    Raises:
        ValueError: not of that form.
    """
    name, sep, key = spec.partition("=")
    try:
        public_key = bytes.fromhex(key)
    except ValueError:
        public_key = b""
    if not sep or len(public_key) != 32:
        raise ValueError(f"witness {spec!r} is not '<key name>=<64 hex digits>'")
    return Witness(check_name(name), public_key)


def witnesses(config: Any) -> tuple[Witness, ...]:
    """The witnesses a ``JournalConfig`` names (``tlog_witnesses``)."""
    return tuple(parse_witness(spec) for spec in config.tlog_witnesses)


def cosignature_message(body: bytes, timestamp: int) -> bytes:
    """What an Ed25519 witness signs (``tlog-cosignature``)."""
    return b"cosignature/v1\ntime %d\n" % timestamp + body


def cosignature_line(witness: Witness, timestamp: int, signature: bytes) -> bytes:
    """A witness's signature line over a checkpoint."""
    key = key_id(witness.name, witness.public_key, COSIGNATURE_TYPE)
    return signature_line(witness.name, key, _U64.pack(timestamp) + signature)


def valid_cosignature(sig: Signature, body: bytes, witness: Witness) -> bool:
    """True when ``sig`` is ``witness``'s cosignature of the checkpoint ``body``."""
    if sig.name != witness.name or len(sig.signature) != 72:
        return False
    if sig.key_id != key_id(witness.name, witness.public_key, COSIGNATURE_TYPE):
        return False
    timestamp = _U64.unpack(sig.signature[:8])[0]
    if timestamp >= 1 << 63:
        return False
    return signature_valid(witness.public_key, cosignature_message(body, timestamp),
                           sig.signature[8:])  # fmt: skip


def add_cosignatures(
    stored: bytes, offered: bytes, witnesses: Iterable[Witness]
) -> tuple[bytes, list[str]]:
    """``stored`` with the valid cosignatures of ``offered`` (same body) added.

    Returns the new note and the names of the witnesses whose cosignature was
    added (a witness's newer cosignature replaces its older one).

    Raises:
        NoteError: ``offered`` is malformed, for another checkpoint, or carries
            no valid cosignature by a configured witness.
    """
    mine, theirs = parse_note(stored), parse_note(offered)
    if theirs.body != mine.body:
        raise NoteError("the cosigned checkpoint is not the log's current checkpoint")
    by_name = {w.name: w for w in witnesses}
    kept = list(mine.signatures)
    added: list[str] = []
    for sig in theirs.signatures:
        witness = by_name.get(sig.name)
        if witness is None or not valid_cosignature(sig, mine.body, witness):
            continue
        kept = [s for s in kept if s.name != sig.name]
        kept.append(sig)
        added.append(sig.name)
    if not added:
        raise NoteError("no valid cosignature by a configured witness")
    return Note(mine.body, tuple(kept)).text(), added
