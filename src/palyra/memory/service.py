"""Memory as the daemon runs it: ingest, search, get, list, delete, purge.

Writes are deterministic (no model on the write path): an item is embedded
and journaled in one commit (a ``memory.*`` event plus the row), then indexed.
The index (:mod:`palyra.memory.index`) is rebuilt from the table at start.
Items written by other parts of the daemon (learning) reach the index through
:meth:`Memory.refresh`, which every search calls when the table changed.

Who sees what: an item belongs to its owner (the principal that stated it);
``session``-scoped items only show in their session. Operators see all.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from palyra.core.errors import InvalidArgument, NotFound
from palyra.core.ids import new_ulid
from palyra.journal import EventDraft, JournalStore
from palyra.memory.embed import Embedder, default_embedder
from palyra.memory.index import Hit, MemoryIndex
from palyra.memory.items import (
    TABLE,
    MemoryItem,
    Provenance,
    get_item,
    item_delete,
    item_write,
    scan_items,
)

MAX_TEXT = 4096
MAX_TAGS = 16
ACTOR = "system:memory"


def _now() -> int:
    return time.time_ns() // 1_000_000


class Memory:
    """The memory items of one journal, indexed for hybrid search."""

    def __init__(self, store: JournalStore, embedder: Embedder | None = None, *,
                 now_ms: Callable[[], int] = _now) -> None:
        self._store = store
        self._now = now_ms
        self.index = MemoryIndex(embedder or default_embedder())
        self._items: dict[str, MemoryItem] = {}
        self._seen = -2

    def refresh(self) -> None:
        """Re-read the table if a commit wrote it since the last look."""
        version = self._store.table_version(TABLE)
        if version == self._seen and version != -1:
            return
        self._seen = version
        stored = {item.memory_id: item for item in scan_items(self._store)}
        for gone in set(self._items) - set(stored):
            self.index.remove(gone)
            del self._items[gone]
        fresh = [item for mid, item in stored.items() if self._items.get(mid) != item]
        if fresh:
            vectors = self.index.embedder.embed([item.text for item in fresh])
            for item, vector in zip(fresh, vectors, strict=True):
                self.index.add(item.memory_id, item.text, item.created_ms, vector)
                self._items[item.memory_id] = item

    # -- writes --------------------------------------------------------------
    async def ingest(self, owner: str, text: str, *, session_id: str = "", scope: str = "",
                     tags: list[str] | None = None, confidence_bps: int = 10_000,
                     ttl_ms: int = 0, device_id: str = "", agent_id: str = "") -> MemoryItem:
        """Store one item (its provenance is the ingest event itself)."""
        text = text.strip()
        if not text or len(text) > MAX_TEXT:
            raise InvalidArgument(f"memory text must be 1..{MAX_TEXT} characters")
        tags = [t for t in (tags or []) if t][:MAX_TAGS]
        now = self._now()
        event_id = new_ulid(now)
        item = MemoryItem(
            memory_id=new_ulid(now), kind="note", text=text, owner=owner,
            scope=scope or ("agent" if agent_id else "session" if session_id else "principal"),
            session_id=session_id, agent_id=agent_id,
            tags=tags, confidence_bps=max(0, min(10_000, confidence_bps)),
            expires_ms=now + ttl_ms if ttl_ms > 0 else 0, created_ms=now,
            provenance=Provenance(session_id=session_id, run_id="", tape_seqs=[], positions=[],
                                  sha256=hashlib.sha256(text.encode()).hexdigest(),
                                  source="api", event_id=event_id))
        before = self._store.table_version(TABLE)
        await self._store.append([EventDraft(
            kind="memory.ingested", actor=owner, principal=owner, device_id=device_id,
            session_id=session_id, event_id=event_id,
            payload={"memory_id": item.memory_id, "text": text, "tags": tags},
            entity_writes=(item_write(item),))])
        if self._seen == before != -1 and self._store.table_version(TABLE) == before + 1:
            # Only this commit wrote the table since the last look: index it directly
            # instead of re-reading every item.
            self.index.add(item.memory_id, item.text, item.created_ms)
            self._items[item.memory_id] = item
            self._seen = before + 1
        else:
            self.refresh()
        return item

    async def delete(self, memory_id: str, by: str) -> bool:
        """Remove one item (journaled with who)."""
        item = get_item(self._store, memory_id)
        if item is None:
            return False
        await self._store.append([EventDraft(
            kind="memory.deleted", actor=by, principal=by, session_id=item.session_id,
            payload={"memory_id": memory_id}, entity_writes=(item_delete(memory_id),))])
        self.refresh()
        return True

    async def purge(self, by: str, *, session_id: str = "") -> int:
        """Remove every item (of one session, if given); the count removed."""
        doomed = [i.memory_id for i in scan_items(self._store)
                  if not session_id or i.session_id == session_id]
        if doomed:
            await self._store.append([EventDraft(
                kind="memory.purged", actor=by, principal=by, session_id=session_id,
                payload={"session_id": session_id, "count": len(doomed)},
                entity_writes=tuple(item_delete(m) for m in doomed))])
        self.refresh()
        return len(doomed)

    # -- reads ---------------------------------------------------------------
    def get(self, memory_id: str) -> MemoryItem:
        """One item.

        Raises:
            NotFound: no such item.
        """
        item = get_item(self._store, memory_id)
        if item is None:
            raise NotFound(f"no memory item {memory_id}", details={"memory_id": memory_id})
        return item

    def visible(self, principal: str, session_id: str, *, everyone: bool = False,
                agent_id: str = "") -> Callable[[MemoryItem], bool]:
        """Which items a caller sees (in ``session_id`` and for ``agent_id``'s runs, when
        given): its own principal-wide items, its items of that session, and its items
        scoped to that agent."""
        now = self._now()

        def sees(item: MemoryItem) -> bool:
            if item.expires_ms and item.expires_ms <= now:
                return False
            if not everyone and item.owner != principal:
                return False
            if item.scope == "agent":
                return everyone or (bool(agent_id) and item.agent_id == agent_id)
            if session_id and item.scope == "session" and item.session_id != session_id:
                return False
            return not (not session_id and item.scope == "session" and not everyone)

        return sees

    def search(self, query: str, sees: Callable[[MemoryItem], bool], *, limit: int = 10,
               min_score_bps: int = 0) -> list[tuple[MemoryItem, Hit]]:
        """Hybrid search over what ``sees`` admits, best first."""
        self.refresh()
        items = self._items
        hits = self.index.search(query, self._now(), limit=limit,
                                 allowed=lambda mid: mid in items and sees(items[mid]))
        return [(items[h.memory_id], h) for h in hits if h.score_bps >= min_score_bps]

    def of_kind(self, kind: str, sees: Callable[[MemoryItem], bool], *,
                limit: int) -> list[MemoryItem]:
        """The newest ``limit`` items of ``kind`` that ``sees`` admits (from memory)."""
        self.refresh()
        found = [i for i in self._items.values() if i.kind == kind and sees(i)]
        found.sort(key=lambda i: (i.created_ms, i.memory_id), reverse=True)
        return found[:limit]

    def page(self, sees: Callable[[MemoryItem], bool], *, after_id: str = "",
             limit: int = 100) -> tuple[list[MemoryItem], str]:
        """Items in id order after ``after_id``."""
        rows = [i for i in scan_items(self._store) if sees(i) and i.memory_id > after_id]
        page = rows[:limit]
        return page, (page[-1].memory_id if len(rows) > limit else "")
