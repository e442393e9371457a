"""Line types of the NDJSON export bundle (format ``palyra.journal.bundle``, :data:`BUNDLE_VERSION`).

Every line is the compact JSON of one of these structs with keys sorted
(``msgspec.json.encode(line, order="sorted")``) followed by ``\\n``. Verifiers
re-encode each parsed line and require identical bytes, so no byte of a bundle
can change without being noticed, even where JSON would allow an equivalent
spelling (``1e5``/``1E5``, hex case, key order).
"""

from __future__ import annotations

from typing import Any

import msgspec

from palyra.core.event_header import EventHeader

BUNDLE_FORMAT = "palyra.journal.bundle"
BUNDLE_VERSION = 5
"""Written version: sealed (v2), a record's event (or link) lines share its hashes (v3),
a record that retention pruned is one ``pruned`` line (v4), and the seal signs the
SHA-256 of every line before it (v5), so it covers every field of every line.

Version 2 bundles hold format 1 records only, one per line; version 1 bundles also
carry no seal. All still verify; see ``verify.bundle_records``. A v2..v4 seal does not
cover a tombstone's ``session_id``/``prev_hash`` (no hash does), so with a trusted key a
v4 bundle holding ``pruned`` lines is refused (re-export it).
"""
SEAL_DIGEST_VERSION = 5
"""From this version on a seal carries (and signs) ``sha256``."""
#: Versions a verifier reads: v1 bundles carry no seal (they verify unsigned only).
READABLE_VERSIONS = frozenset({1, 2, 3, 4, 5})


class _Line(msgspec.Struct, tag_field="type", forbid_unknown_fields=True, frozen=True):
    pass


class HeaderLine(_Line, tag="header", frozen=True):
    """First line. ``scope`` is ``full`` or ``session`` (then ``session_id`` is set)."""

    format: str
    version: int
    scope: str
    session_id: str
    hash: str
    exported_at_ms: int


class EventLine(_Line, EventHeader, tag="event", frozen=True):
    """A whole event: every field its hash covers, plus the three hashes (hex).

    The header fields come from :class:`EventHeader`; keys are sorted on
    output, so their order in the class does not reach the bundle's bytes.
    """

    payload: dict[str, Any]
    redactions: list[str]
    prev_hash: str
    hash: str
    global_hash: str


class LinkLine(_Line, tag="link", frozen=True):
    """Another session's position in a session bundle: its event hash and link hash only."""

    position: int
    hash: str
    global_hash: str


class PrunedLine(_Line, tag="pruned", frozen=True):
    """A record retention pruned (positions ``position..last``): what its tombstone keeps.

    Its events are gone; ``prev_hash``, ``hash`` and ``global_hash`` still chain.
    """

    position: int
    last: int
    session_id: str
    prev_hash: str
    hash: str
    global_hash: str


class CheckpointLine(_Line, tag="checkpoint", frozen=True):
    """A signed checkpoint; placed right after the line of its position."""

    position: int
    head_hash: str
    ts_ms: int
    public_key: str
    signature: str


class SealLine(_Line, tag="seal", frozen=True, omit_defaults=True):
    """The exporter's signature over the whole export (``core.chain.seal_message``).

    Right before the trailer (only the trailer may follow); covered by the trailer's
    digest. With a trusted key a verifier requires it: it is what proves the bundle was
    not cut short, (for a session bundle) holds every event of its session and, from
    version 5 on (``sha256``: the SHA-256 of every byte before the seal line), that no
    line changed at all. Its signature is checked with or without a key.
    """

    head_position: int
    head_hash: str
    session_head: str
    session_events: int
    ts_ms: int
    public_key: str
    signature: str
    sha256: str = ""  # version 5 on; absent before


class TrailerLine(_Line, tag="trailer", frozen=True):
    """Last line: counts, heads and the SHA-256 of every preceding byte."""

    events: int
    links: int
    checkpoints: int
    head_position: int
    head_hash: str
    session_head: str
    sha256: str


Line = HeaderLine | EventLine | LinkLine | PrunedLine | CheckpointLine | SealLine | TrailerLine

_ENCODER = msgspec.json.Encoder(order="sorted")
_DECODER: msgspec.json.Decoder[Line] = msgspec.json.Decoder(Line)


def encode_line(line: Line) -> bytes:
    """The canonical bytes of a line, newline included."""
    return _ENCODER.encode(line) + b"\n"


def decode_line(data: bytes) -> Line:
    """Parse one line (without its newline) and require canonical bytes.

    Raises:
        ValueError: malformed JSON, wrong field types, or non-canonical bytes.
    """
    try:
        line = _DECODER.decode(data)
    except msgspec.DecodeError as exc:
        raise ValueError(f"malformed line ({exc})") from exc
    if _ENCODER.encode(line) != data:
        raise ValueError("line is not in canonical form (bytes were altered)")
    return line


def parse_hash(text: str) -> bytes:
    """32 bytes from 64 lowercase hex digits.

    Raises:
        ValueError: when ``text`` is not exactly that.
    """
    try:
        raw = bytes.fromhex(text)
    except ValueError as exc:
        raise ValueError(f"bad hash {text!r}") from exc
    if len(raw) != 32 or raw.hex() != text:
        raise ValueError(f"bad hash {text!r}")
    return raw
