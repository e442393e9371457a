"""What the router keeps in the journal's ``channels`` table, and under which keys.

``msg:<envelope_id>``       every admitted message with its routing decision
``dedupe:<sha256>``         (provider, account, delivery id) → the first delivery's outcome,
                           and (channel, conversation, platform message id) → the same
``quarantine:<id>``         refused messages and messages that never found a slot
``ctx:<session_key>␟<id>``  messages kept for context, until the next run reads them
``hint:<channel>␟<sender>`` when an unpaired sender was last told how to pair (ms)
"""

from __future__ import annotations

import hashlib

import msgspec

from palyra.channels.routing import Decision, Envelope
from palyra.journal import EntityWrite

TABLE = "channels"
MSG, DEDUPE, QUARANTINE, CTX, HINT = "msg:", "dedupe:", "quarantine:", "ctx:", "hint:"


class InboundRec(msgspec.Struct, frozen=True, kw_only=True):
    """An admitted message: the envelope, the decision, the dispatch task, the reply sink."""

    envelope: Envelope
    decision: Decision
    admitted_ms: int
    task_id: str = ""
    sink: str = ""


class DedupeRec(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome a redelivery of the same event gets back, until ``expires_ms``."""

    envelope_id: str
    task_id: str
    action: str
    reason: str
    admitted_ms: int
    expires_ms: int


class QuarantineRec(msgspec.Struct, frozen=True, kw_only=True):
    quarantine_id: str
    reason: str
    envelope: Envelope
    at_ms: int


def dedupe_key(provider: str, account: str, event_id: str) -> str:
    """The row key of one platform event (hashed: ids may be long or odd)."""
    raw = f"{provider}\x1f{account}\x1f{event_id}".encode()
    return DEDUPE + hashlib.sha256(raw).hexdigest()


def message_key(channel: str, conversation_id: str, message_id: str) -> str:
    """The row key of one platform message in its conversation, whatever delivery carried it
    (a sender that re-sends a message under a new delivery id is still deduplicated)."""
    return dedupe_key("message", f"{channel}\x1f{conversation_id}", message_id)


def encode(rec: msgspec.Struct) -> bytes:
    return msgspec.msgpack.encode(rec)


def msg_write(rec: InboundRec) -> EntityWrite:
    return EntityWrite(TABLE, MSG + rec.envelope.envelope_id, encode(rec))


def ctx_key(session_key: str, envelope_id: str) -> str:
    return f"{CTX}{session_key}\x1f{envelope_id}"


def hint_key(channel: str, sender: str) -> str:
    return f"{HINT}{channel}\x1f{sender}"
