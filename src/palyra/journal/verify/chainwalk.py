"""Streaming chain verifier shared by live-data-dir and bundle verification.

Feed it records in order (stored records, records rebuilt from a bundle's
event lines, link-only entries, checkpoints); it raises :class:`Tampered` at
the first position that does not check out. A format 2 record is checked by
hashing its stored bytes as they are: no decoding, no re-encoding.

Every failure names where it is (``where``: "record under key N" in a data dir,
"line N (event)" in a bundle, given by the caller), the field and what was
expected, so a reader can find the line and see what disagrees.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

import msgspec

from palyra.core.chain import GENESIS, LINK_TAG, checkpoint_message, event_hash, link_hash
from palyra.journal.format.record import (
    FIRST_AT,
    FRONT,
    GLOBAL_AT,
    HASH_AT,
    HASHED_AT,
    PREV_AT,
    PRUNED_KIND,
    RECORD_FORMAT,
    RETENTION_SESSION,
    SESSION_AT,
    TOMBSTONE_FORMAT,
    EventRecord,
    RecordEvent,
    decode_event,
    decode_tombstone,
    is_format2,
    key_u64,
    record_hashes,
)
from palyra.journal.format.signing import signature_valid
from palyra.journal.verify.segment import Segment

_sha256 = hashlib.sha256
_FRONT_UNPACK = FRONT.unpack_from
_U64_PACK = struct.Struct(">Q").pack
_JOIN = b"".join
_EMPTY = hashlib.sha256()
_LINK = hashlib.sha256(LINK_TAG)  # copying a started hash is cheaper than starting one
_RETENTION = RETENTION_SESSION.encode("utf-8")
_ROWS = msgspec.msgpack.Decoder(list[RecordEvent])


class Tampered(Exception):
    """Raised when verification finds the first inconsistency.

    ``position`` is the first bad global position, or None when the problem
    is not tied to one (a malformed header, a bad trailer). ``reason`` opens with
    where the problem is (a record's key, a bundle's line), then names the field
    and what was expected.
    """

    def __init__(self, position: int | None, reason: str) -> None:
        super().__init__(reason)
        self.position = position
        self.reason = reason

    def describe(self) -> str:
        """``TAMPERED position=N: reason`` (the CLI's first output line)."""
        if self.position is None:
            return f"TAMPERED: {self.reason}"
        return f"TAMPERED position={self.position}: {self.reason}"


class ChainVerifier:
    """Walks the global chain position by position."""

    def __init__(
        self, *, session_id: str | None = None, trusted_keys: Collection[bytes] = ()
    ) -> None:
        self.session_id = session_id
        self.trusted_keys = frozenset(trusted_keys)
        self.position = 0
        self.head = GENESIS
        self.events = 0
        self.links = 0
        self.checkpoints = 0
        # Keyed by the UTF-8 session id: format 2 records are checked without decoding it.
        self._heads: dict[bytes, bytes] = {}
        # How far a valid signature reaches: by a trusted key when keys are given.
        self.signed_through = 0
        # Retention: positions seen as tombstones (always a prefix), the global
        # hash after the last one, and the latest journal.pruned claim seen
        # (its position, the range end it states and the hash it states there).
        self.pruned = 0
        self.pruned_through = 0
        self.pruned_head = GENESIS
        self.claim: tuple[int, int, str, str] | None = None
        # Stored records containing ``marker`` are kept in ``noted`` as they pass
        # (the verifier recomputes compaction digests from them: ``verify.covers``).
        self.marker: bytes | None = None
        self.noted: list[bytes] = []
        # A tombstone's session id is covered by no hash it still holds: when its record
        # was the only one of its session, renaming the session breaks neither chain.
        # A data dir's verifier notes ``(session, first, last)`` here and holds it to the
        # ``_by_session`` index (``_verify``); None: not noted (bundles have no index).
        self.tombstones: list[tuple[str, int, int]] | None = None
        # ``(record hash, key)`` of each stored record :meth:`stored_run` passed, for the
        # transparency log's check (``verify.tree``: the walk's hashes, not a second
        # read); its caller empties it every chunk. None: not collected.
        self.leaves: list[tuple[bytes, bytes]] | None = None

    @property
    def session_heads(self) -> dict[str, bytes]:
        """The last record hash of each session seen so far."""
        return {session.decode("utf-8", "replace"): head for session, head in self._heads.items()}

    def check_next(self, position: int, where: str) -> None:
        """Raise :class:`Tampered` unless ``position`` is the next one of the chain."""
        self._advance(position, where)

    def _advance(self, position: int, where: str) -> None:
        expected = self.position + 1
        if position < expected:
            raise Tampered(expected, out_of_order(where, position, expected))
        if position > expected:
            raise Tampered(expected, f"{where}: position is {position}, expected {expected} "
                                     f"(positions {expected}..{position - 1} are missing)")

    def stored(self, key: bytes, value: bytes) -> int:
        """Check one record as stored under ``key`` (either format); return its last position.

        Raises:
            Tampered: the record does not check out.
        """
        if value[:1] == bytes((TOMBSTONE_FORMAT,)):
            return self._stored_tombstone(key, value)
        if not is_format2(value):
            return self._stored_format1(key, value)
        # The hot loop of `journal verify`: no decoding, few allocations.
        first, count, session_len = _FRONT_UNPACK(value, FIRST_AT)
        last: int = first + count - 1
        where = record_at(key, first, last)
        if first != self.position + 1:
            self._advance(first, where)
        end = SESSION_AT + session_len
        if count < 1 or end >= len(value):
            raise Tampered(first, f"{where}: count is {count} and session_len {session_len} "
                                  f"in a record of {len(value)} bytes, expected at least one "
                                  "event after the session id")
        if key != _U64_PACK(last):
            raise Tampered(first, f"{where}: first is {first} and count {count}, so its last "
                                  f"position is {last}, expected {key_u64(key)} (a record is "
                                  "stored under its last position)")
        digest = _sha256(value[HASHED_AT:]).digest()
        if not value.startswith(digest, HASH_AT):
            raise Tampered(first, hash_mismatch(
                where, value[HASH_AT : HASH_AT + 32], digest,
                "the SHA-256 of the record's header and events as stored"))
        tag = value[end]
        if not (0x90 <= tag <= 0x9F and tag - 0x90 == count) and _array_length(value, end) != count:
            raise Tampered(first, f"{where}: undecodable record (count is {count}, the body "
                                  f"holds {_array_length(value, end)} events; expected equal)")
        session = value[SESSION_AT:end]
        heads = self._heads
        if self.session_id is not None or not value.startswith(
            heads.get(session, GENESIS), PREV_AT
        ):
            self._session_step(first, session, value[PREV_AT : PREV_AT + 32], where)
        link = _sha256(_JOIN((LINK_TAG, self.head, key, digest))).digest()
        if not value.startswith(link, GLOBAL_AT):
            raise Tampered(first, self._link_mismatch(
                where, value[GLOBAL_AT : GLOBAL_AT + 32], link, last))
        self.head = link
        self.position = last
        heads[session] = digest
        self.events += count
        if session == _RETENTION:
            self._claims(first, value[end:], where)
        return last

    def _stored_tombstone(self, key: bytes, value: bytes) -> int:
        try:
            tomb = decode_tombstone(value)
        except ValueError as exc:
            raise Tampered(self.position + 1, f"record under key {key_u64(key)} (pruned): "
                                              f"undecodable record ({exc})") from exc
        where = record_at(key, tomb.first, tomb.last, "pruned, ")
        if key != _U64_PACK(tomb.last):
            raise Tampered(tomb.first, f"{where}: last is {tomb.last}, expected {key_u64(key)} "
                                       "(a record is stored under its last position)")
        self.tombstone(tomb.first, tomb.last, tomb.session_id, tomb.prev_hash, tomb.hash,
                       tomb.global_hash, where)
        return tomb.last

    def _stored_format1(self, key: bytes, value: bytes) -> int:
        where = f"record under key {key_u64(key)}"
        try:
            legacy = decode_event(value)
        except ValueError as exc:  # msgspec.DecodeError is a ValueError
            raise Tampered(self.position + 1, f"{where}: undecodable record ({exc})") from exc
        if len(key) != 8 or legacy.position != key_u64(key):
            raise Tampered(self.position + 1, f"{where}: position is {legacy.position}, "
                                              f"expected {key_u64(key)} (an event is stored "
                                              "under its position)")
        self.event(legacy, where)
        return legacy.position

    def _claims(self, first: int, body: bytes, where: str) -> None:
        """Note the ``journal.pruned`` claims among a retention record's events."""
        try:
            rows = _ROWS.decode(body)
        except msgspec.DecodeError as exc:
            raise Tampered(first, f"{where}: undecodable record ({exc})") from exc
        for offset, row in enumerate(rows):
            if row.kind == PRUNED_KIND:
                self.claimed(first + offset, row.payload, where)

    def stored_run(self, items: Iterator[tuple[bytes, bytes]], until: int, limit: int,
                   progress: Callable[[int], None] | None = None) -> int:  # fmt: skip
        """Check stored records like :meth:`stored` until position ``until`` or ``limit`` records.

        Returns how many were read. The hot loop of ``journal verify``, so inline:
        a well-formed format 2 record of up to 15 events costs two SHA-256 and a few
        byte comparisons; anything else goes through :meth:`stored`, which words errors.
        """
        read, heads, fast = 0, self._heads, self.session_id is None
        position, head, events = self.position, self.head, self.events
        marker, noted, leaves = self.marker, self.noted, self.leaves
        try:
            for key, value in items:
                read += 1
                if marker is not None and marker in value:
                    noted.append(bytes(value))
                start = position + 1
                last = -1
                if fast and value[0] == RECORD_FORMAT and len(value) > SESSION_AT:
                    first, count, session_len = _FRONT_UNPACK(value, FIRST_AT)
                    end = SESSION_AT + session_len
                    if (
                        first == position + 1
                        and end < len(value)
                        and value[end] - 0x90 == count  # a fixarray of `count` >= 1 events
                        and count > 0
                        and key == _U64_PACK(first + count - 1)
                    ):
                        hasher = _EMPTY.copy()
                        hasher.update(value[HASHED_AT:])
                        digest = hasher.digest()
                        session = value[SESSION_AT:end]
                        if (
                            value.startswith(digest, HASH_AT)
                            and value.startswith(heads.get(session, GENESIS), PREV_AT)
                            and session != _RETENTION  # journal.pruned claims: decoded
                        ):
                            hasher = _LINK.copy()
                            hasher.update(head + key + digest)
                            link = hasher.digest()
                            if value.startswith(link, GLOBAL_AT):
                                last = first + count - 1
                                head, position = link, last
                                heads[session] = digest
                                events += count
                                if leaves is not None:
                                    leaves.append((digest, key))
                if last < 0:
                    self.position, self.head, self.events = position, head, events
                    last = self.stored(key, value)
                    position, head, events = self.position, self.head, self.events
                    if leaves is not None:
                        leaves.append((record_hashes(value)[0], key))
                if progress is not None:
                    list(map(progress, range(start, last + 1)))
                if last >= until or read >= limit:
                    break
        finally:
            self.position, self.head, self.events = position, head, events
        return read

    def joins(self, segment: Segment) -> bool:
        """Whether a run of records checked apart (``verify.segment``) continues the chain
        here: its first position, its first record's link and each session's first
        ``prev_hash``. Changes nothing; a run that does not join is walked serially."""
        if self.session_id is not None or segment.first != self.position + 1:
            return False
        key, digest, stated = segment.entry
        hasher = _LINK.copy()
        hasher.update(self.head + key + digest)
        if hasher.digest() != stated:
            return False
        heads = self._heads
        return all(heads.get(session, GENESIS) == prev
                   for session, prev in segment.opened.items())  # fmt: skip

    def take(self, segment: Segment) -> None:
        """Advance over a run that :meth:`joins` here."""
        self._heads.update(segment.heads)
        self.position, self.head = segment.last, segment.head
        self.events += segment.events

    def record(
        self, first: int, last: int, session_id: str, prev: bytes, digest: bytes, claimed: bytes,
        global_hash: bytes, where: str,
    ) -> None:  # fmt: skip
        """Check a format 2 record whose hash ``digest`` the caller recomputed from its events.

        ``claimed`` is the hash the record's events state.
        """
        self._advance(first, where)
        if digest != claimed:
            raise Tampered(first, hash_mismatch(
                where, claimed, digest, "the SHA-256 of the record rebuilt from these lines"))
        session = session_id.encode("utf-8")
        self._session_step(first, session, prev, where)
        self._link(last, digest, global_hash, where, first)
        self._heads[session] = digest
        self.events += last - first + 1

    def tombstone(
        self, first: int, last: int, session_id: str, prev: bytes, digest: bytes,
        global_hash: bytes, where: str,
    ) -> None:  # fmt: skip
        """Check a pruned record: its content is gone, its place in both chains is not.

        Retention prunes only a prefix of the log, so a tombstone after an
        unpruned event is tampering (a record hidden by rewriting it as one).
        """
        self._advance(first, where)
        if self.events:
            raise Tampered(first, f"{where}: a pruned record after {self.events} unpruned "
                                  "events, expected pruned records only at the start (retention "
                                  "prunes a prefix of the log: a record was hidden as a "
                                  "tombstone)")
        session = session_id.encode("utf-8")
        self._session_step(first, session, prev, where)
        self._link(last, digest, global_hash, where, first)
        self._heads[session] = digest
        self.pruned += last - first + 1
        if self.tombstones is not None:
            self.tombstones.append((session_id, first, last))
        self.pruned_through, self.pruned_head = last, global_hash

    def claimed(self, position: int, payload: Mapping[str, Any], where: str) -> None:
        """Note a ``journal.pruned`` event at ``position`` (checked by :meth:`finish`)."""
        through, head = payload.get("through"), payload.get("head_hash")
        if not isinstance(through, int) or not isinstance(head, str):
            raise Tampered(position, f"{where}: journal.pruned at position {position} has "
                                     f"through={through!r} and head_hash={head!r}, expected an "
                                     "integer and a hex string")
        self.claim = (position, through, head, where)

    def finish(self) -> None:
        """After the whole log: the latest ``journal.pruned`` claim must match the tombstones.

        Only for a full walk (a session bundle holds no one else's claims).
        """
        if self.session_id is not None:
            return
        if self.claim is None:
            if self.pruned:
                raise Tampered(1, f"positions 1..{self.pruned_through} are pruned records but "
                                  "no journal.pruned event records it (expected one in the "
                                  f"{RETENTION_SESSION!r} session)")
            return
        position, through, head, where = self.claim
        if (through, head) != (self.pruned_through, self.pruned_head.hex()):
            raise Tampered(position, f"{where}: journal.pruned at position {position} says "
                                     f"through={through}, head_hash={head}; expected "
                                     f"through={self.pruned_through}, head_hash="
                                     f"{self.pruned_head.hex()} (the last pruned record's)")

    def _session_step(self, first: int, session: bytes, prev: bytes, where: str) -> None:
        session_id = session.decode("utf-8", "replace")
        if self.session_id is not None and session_id != self.session_id:
            raise Tampered(first, self._foreign_session(where, session_id))
        head = self._heads.get(session, GENESIS)
        if prev != head:
            raise Tampered(first, prev_mismatch(where, prev, head, session_id))

    def _foreign_session(self, where: str, session_id: str) -> str:
        return (f"{where}: session_id is {session_id!r}, expected {self.session_id!r} (the "
                "bundle's session: another session's positions are link lines)")

    def event(self, record: EventRecord, where: str) -> None:
        """Check one whole format 1 event (a record of its own) and advance."""
        self._advance(record.position, where)
        position = record.position
        if self.session_id is not None and record.session_id != self.session_id:
            raise Tampered(position, self._foreign_session(where, record.session_id))
        try:
            digest = event_hash(record.prev_hash, record, record.redactions, record.payload)
        except (struct.error, OverflowError) as exc:  # an int the pre-image cannot hold
            raise Tampered(position, f"{where}: undecodable record ({exc})") from exc
        if digest != record.hash:
            raise Tampered(position, hash_mismatch(
                where, record.hash, digest, "the SHA-256 of the event's header and payload"))
        session = record.session_id.encode("utf-8")
        head = self._heads.get(session, GENESIS)
        if record.prev_hash != head:
            raise Tampered(position, prev_mismatch(where, record.prev_hash, head,
                                                   record.session_id))
        self._link(position, digest, record.global_hash, where)
        self._heads[session] = digest
        self.events += 1

    def link(self, first: int, last: int, digest: bytes, global_hash: bytes, where: str) -> None:
        """Check link-only entries (another session's record, ``first..last``) and advance."""
        self._advance(first, where)
        if self.session_id is None:
            raise Tampered(first, f"{where}: a link line in a full bundle, expected event "
                                  "lines (a full bundle holds every event)")
        self._link(last, digest, global_hash, where, first)
        self.links += last - first + 1

    def _link(self, position: int, digest: bytes, global_hash: bytes, where: str,
              first: int = 0) -> None:  # fmt: skip
        want = link_hash(self.head, position, digest)
        if want != global_hash:
            raise Tampered(first or position,
                           self._link_mismatch(where, global_hash, want, position))
        self.head = global_hash
        self.position = position

    def _link_mismatch(self, where: str, got: bytes, want: bytes, last: int) -> str:
        return (f"{where}: global_hash is {got.hex()}, expected {want.hex()} (the link of "
                f"the global hash at position {self.position} with this record's last "
                f"position {last} and hash: the chain's order or a link changed)")

    def checkpoint(
        self, position: int, head: bytes, ts_ms: int, public_key: bytes, signature: bytes,
        where: str,
    ) -> None:  # fmt: skip
        """Check a checkpoint against the chain at the current position."""
        if position != self.position:
            if position > self.position:
                raise Tampered(
                    self.position + 1,
                    f"{where}: position is {position}, beyond the verified chain at "
                    f"{self.position} (expected the checkpoint right after the record it "
                    f"signs: events after {self.position} are missing or out of place)",
                )
            raise Tampered(position, f"{where}: position is {position}, expected "
                                     f"{self.position} (a checkpoint follows the record it "
                                     "signs: checkpoint out of order)")
        if head != self.head:
            raise Tampered(position, f"{where}: head_hash is {head.hex()}, expected "
                                     f"{self.head.hex()} (the global hash at position "
                                     f"{position}: signed checkpoint does not match the chain)")
        if self.trusted_keys and public_key not in self.trusted_keys:
            raise Tampered(position, f"{where}: public_key is {public_key.hex()}, expected one "
                                     "of the trusted keys (checkpoint signed by an untrusted "
                                     "key)")
        if not signature_valid(public_key, checkpoint_message(position, head, ts_ms), signature):
            raise Tampered(position, f"{where}: signature does not verify, expected an ed25519 "
                                     "signature by public_key over position, head_hash and "
                                     "ts_ms (checkpoint signature is invalid)")
        self.checkpoints += 1
        self.signed_through = max(self.signed_through, position)


def record_at(key: bytes, first: int, last: int, kind: str = "") -> str:
    """``record under key 9 (positions 7..9)``: where a stored record is."""
    span = f"position {first}" if first == last else f"positions {first}..{last}"
    return f"record under key {key_u64(key)} ({kind}{span})"


def out_of_order(where: str, position: int, expected: int) -> str:
    """The message for an entry whose position was already verified."""
    return (f"{where}: position is {position}, expected {expected} (out of order: "
            f"position {position} was already verified)")


def hash_mismatch(where: str, got: bytes, want: bytes, what: str) -> str:
    """The message for a record whose stated hash is not the one its content gives."""
    return (f"{where}: hash is {got.hex()}, expected {want.hex()} ({what}: a payload or "
            "header field changed)")


def prev_mismatch(where: str, got: bytes, want: bytes, session_id: str) -> str:
    """The message for a record whose ``prev_hash`` breaks its session's chain."""
    previous = ("the genesis hash: no earlier record of the session" if want == GENESIS
                else "the hash of the session's previous record")
    return (f"{where}: prev_hash is {got.hex()}, expected {want.hex()} ({previous}; "
            f"session {session_id!r})")


def _array_length(value: bytes, at: int) -> int:
    """Element count of the MessagePack array header at ``value[at]`` (-1 if none)."""
    tag = value[at]
    if 0x90 <= tag <= 0x9F:
        return tag & 0x0F
    if tag == 0xDC and at + 3 <= len(value):
        return int.from_bytes(value[at + 1 : at + 3], "big")
    if tag == 0xDD and at + 5 <= len(value):
        return int.from_bytes(value[at + 1 : at + 5], "big")
    return -1
