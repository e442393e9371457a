"""Streaming chain verifier shared by live-data-dir and bundle verification.

Feed it positions in order (whole events, link-only entries, checkpoints); it
raises :class:`Tampered` at the first position that does not check out.
"""

from __future__ import annotations

from collections.abc import Collection

from palyra.core.chain import GENESIS, checkpoint_message, event_hash, link_hash
from palyra.journal._record import EventRecord
from palyra.journal._signing import signature_valid


class Tampered(Exception):
    """Raised when verification finds the first inconsistency.

    ``position`` is the first bad global position, or None when the problem
    is not tied to one (a malformed header, a bad trailer).
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
        self.session_heads: dict[str, bytes] = {}
        # How far a valid signature reaches: by a trusted key when keys are given.
        self.signed_through = 0

    def _advance(self, position: int) -> None:
        expected = self.position + 1
        if position < expected:
            raise Tampered(expected, f"entry for position {position} is out of order")
        if position > expected:
            raise Tampered(expected, f"position missing (next entry has position {position})")

    def event(self, record: EventRecord) -> None:
        """Check one whole event and advance."""
        self._advance(record.position)
        position = record.position
        if self.session_id is not None and record.session_id != self.session_id:
            raise Tampered(position, f"event of session {record.session_id!r} in a session bundle")
        digest = event_hash(record.prev_hash, record, record.redactions, record.payload)
        if digest != record.hash:
            raise Tampered(position, "hash mismatch (payload or header changed)")
        expected_prev = self.session_heads.get(record.session_id, GENESIS)
        if record.prev_hash != expected_prev:
            raise Tampered(
                position,
                f"prev_hash does not link to the previous event of session {record.session_id!r}",
            )
        self._link(position, digest, record.global_hash)
        self.session_heads[record.session_id] = digest
        self.events += 1

    def link(self, position: int, digest: bytes, global_hash: bytes) -> None:
        """Check a link-only entry (another session's event) and advance."""
        self._advance(position)
        if self.session_id is None:
            raise Tampered(position, "link-only entry in a full bundle")
        self._link(position, digest, global_hash)
        self.links += 1

    def _link(self, position: int, digest: bytes, global_hash: bytes) -> None:
        if link_hash(self.head, position, digest) != global_hash:
            raise Tampered(position, "global link mismatch (chain order or link hash changed)")
        self.head = global_hash
        self.position = position

    def checkpoint(
        self, position: int, head: bytes, ts_ms: int, public_key: bytes, signature: bytes
    ) -> None:
        """Check a checkpoint against the chain at the current position."""
        if position != self.position:
            if position > self.position:
                raise Tampered(
                    self.position + 1,
                    f"checkpoint at position {position} is beyond the verified chain "
                    f"(events after {self.position} are missing or out of place)",
                )
            raise Tampered(position, "checkpoint out of order")
        if head != self.head:
            raise Tampered(position, "signed checkpoint does not match the chain head here")
        if self.trusted_keys and public_key not in self.trusted_keys:
            raise Tampered(position, "checkpoint signed by an untrusted key")
        if not signature_valid(public_key, checkpoint_message(position, head, ts_ms), signature):
            raise Tampered(position, "checkpoint signature is invalid")
        self.checkpoints += 1
        self.signed_through = max(self.signed_through, position)
