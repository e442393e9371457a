"""Memory items with provenance (the storage the memory service builds on).

Items live in the journal's ``memory`` table (``item:<memory_id>``), each
written in the same commit as the journal event that records why. An item
always says where it came from: the session and run, the tape events and their
journal positions, and the SHA-256 of those events' stored payload bytes, so
anyone can check it against the journal.
"""

from palyra.memory.items import MemoryItem, Provenance, get_item, item_write, source_digest

__all__ = ["MemoryItem", "Provenance", "get_item", "item_write", "source_digest"]
