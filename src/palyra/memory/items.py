"""The memory item record, its provenance, and how it is stored."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import msgspec

from palyra.core.canonical import canonical_bytes
from palyra.journal import EntityWrite, JournalStore, StoredEvent

TABLE = "memory"
_ITEM = "item:"


class Provenance(msgspec.Struct, frozen=True, kw_only=True):
    """Where an item came from, checkable against the journal."""

    session_id: str
    run_id: str
    tape_seqs: list[int]
    positions: list[int]
    # SHA-256 (hex) of the source events' stored payload bytes, in tape order.
    sha256: str
    # What made it, e.g. ``learning:<candidate_id>`` or ``api``.
    source: str
    # The journal event that wrote it, when the source is that event itself (API ingest).
    event_id: str = ""


class MemoryItem(msgspec.Struct, frozen=True, kw_only=True):
    """One remembered thing."""

    memory_id: str
    kind: str  # durable_fact | preference | procedure | note
    text: str
    # ``principal``: the owner's, in every session; ``session``: only ``session_id``;
    # ``agent``: only runs served by ``agent_id``.
    scope: str
    owner: str
    provenance: Provenance
    created_ms: int
    session_id: str = ""
    tags: list[str] = msgspec.field(default_factory=list)
    confidence_bps: int = 10_000
    expires_ms: int = 0
    agent_id: str = ""


def source_digest(events: Iterable[StoredEvent]) -> str:
    """SHA-256 of the events' stored payload bytes (canonical msgpack), concatenated."""
    digest = hashlib.sha256()
    for event in events:
        digest.update(canonical_bytes(event.payload))
    return digest.hexdigest()


def item_write(item: MemoryItem) -> EntityWrite:
    """The entity write that stores ``item``."""
    return EntityWrite(TABLE, _ITEM + item.memory_id, msgspec.msgpack.encode(item))


def item_delete(memory_id: str) -> EntityWrite:
    """The entity write that removes an item."""
    return EntityWrite(TABLE, _ITEM + memory_id, None)


def scan_items(store: JournalStore) -> list[MemoryItem]:
    """Every stored item, in id order."""
    out: list[MemoryItem] = []
    after = ""
    while True:
        rows = store.scan_entities(TABLE, _ITEM, after, 1000)
        out += [msgspec.msgpack.decode(v, type=MemoryItem) for _k, v in rows]
        if len(rows) < 1000:
            return out
        after = rows[-1][0]


def get_item(store: JournalStore, memory_id: str) -> MemoryItem | None:
    """The item, or None."""
    raw = store.get_entity(TABLE, _ITEM + memory_id) if memory_id else None
    return msgspec.msgpack.decode(raw, type=MemoryItem) if raw is not None else None
