"""Memory as the daemon runs it: ingest, search, get, list, delete, purge.

Writes are deterministic (no model on the write path): an item is embedded
and journaled in one commit (a ``memory.*`` event plus the row), then indexed.
The index (:mod:`palyra.memory.index`) is rebuilt from the table at start.
Items written by other parts of the daemon (learning) reach the index through
:meth:`Memory.refresh`, which every search calls when the table changed.

Vectors are not stored: the index is rebuilt with the configured embedder, so one
index is one vector space, and changing ``[memory] embedder`` re-embeds every item
at the next start (wordllama: about 2 s per 100k items). With a remote embedder
(``openai``) items read at start or written by others are indexed without a vector
("pending"), and the async paths (:meth:`Memory.ingest`, :meth:`Memory.asearch`, and
the daemon's background :meth:`Memory.start` loop) embed them in batches. An ingest
whose embedding fails is still journaled and acknowledged; it ranks by BM25 and
recency until the endpoint answers again (:meth:`Memory.status` says how many items
wait and the last error). The one synchronous call to the endpoint is
:meth:`Memory.search`'s query embedding (one attempt, cached); async callers use
:meth:`Memory.asearch`.

Who sees what: an item belongs to its owner (the principal that stated it);
``session``-scoped items only show in their session. Operators see all.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from palyra.core.errors import InvalidArgument, NotFound, PalyraError
from palyra.core.histogram import SECONDS_BUCKETS, Histogram
from palyra.core.ids import new_ulid
from palyra.journal import EventDraft, JournalStore
from palyra.memory.embed import Embedder, default_embedder
from palyra.memory.items import (
    TABLE,
    MemoryItem,
    Provenance,
    get_item,
    item_delete,
    item_write,
    scan_items,
)
from palyra.memory.visibility import Visibility

if TYPE_CHECKING:
    from palyra.memory.embed import Vectors
    from palyra.memory.index import Hit, MemoryIndex
    from palyra.memory.scope import ScopeColumns

MAX_TEXT = 4096
MAX_TAGS = 16
# The latest expiry an item can hold: the wire's int64. A TTL reaching past it (an
# expiry of "never" spelled as the largest number) is held there, not overflowed.
MAX_EXPIRES_MS = 2**63 - 1
ACTOR = "system:memory"
PENDING_BATCH = 512  # pending items embedded per async call (bounds its latency)
QUERY_CACHE = 256  # query vectors kept (auto-inject and @memory ask the same text)
CATCH_UP_S = 2.0  # how often the background loop looks for items without a vector

_log = structlog.get_logger("palyra.memory")


def _now() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class EmbeddingStatus:
    """How the embeddings stand: the vector space, items still without a vector, and
    the last embedding failure ("" once an embedding succeeded after it)."""

    space: str
    remote: bool
    pending: int
    last_error: str


class Memory:
    """The memory items of one journal, indexed for hybrid search."""

    def __init__(self, store: JournalStore, embedder: Embedder | None = None, *,
                 now_ms: Callable[[], int] = _now) -> None:
        self._store = store
        self._now = now_ms
        self._embedder = embedder or default_embedder()
        self._remote = self._embedder.remote
        # The index and the scope columns (numpy arrays) are built with the first item
        # or search: a daemon whose memory is empty never imports numpy (~16 MB resident).
        self._index: MemoryIndex | None = None
        self._scope_columns: ScopeColumns | None = None
        self._items: dict[str, MemoryItem] = {}
        self.search_seconds = Histogram(SECONDS_BUCKETS)  # ranking time per search (/metrics)
        self._owners: Counter[str] = Counter()  # live items per owner
        self._kinds: dict[str, dict[str, MemoryItem]] = {}  # kind -> id -> item
        self._seen = -2
        self._queries: OrderedDict[str, Vectors] = OrderedDict()
        self._catching_up: asyncio.Task[None] | None = None
        self.last_error = ""

    def status(self) -> EmbeddingStatus:
        """The embedder's vector space, pending items and last failure."""
        if self._index is None:
            space = f"{self._embedder.name}/{self._embedder.dim or '?'}"
            return EmbeddingStatus(space, self._remote, 0, self.last_error)
        return EmbeddingStatus(self._index.space, self._remote, len(self._index.pending),
                               self.last_error)

    @property
    def index(self) -> MemoryIndex:
        """The search index (built, and numpy imported, at its first use)."""
        if self._index is None:
            from palyra.memory.index import MemoryIndex

            self._index = MemoryIndex(self._embedder)
        return self._index

    @property
    def _columns(self) -> ScopeColumns:
        """Visibility as row masks (built with the index)."""
        if self._scope_columns is None:
            from palyra.memory.scope import ScopeColumns

            self._scope_columns = ScopeColumns()
        return self._scope_columns

    def _pending(self) -> set[str]:
        """Items without a vector yet (none before the index exists)."""
        return self._index.pending if self._index is not None else set()

    def owns_any(self, owner: str) -> bool:
        """Whether ``owner`` has any item (auto-inject skips its search when not)."""
        self.refresh()
        return self._owners[owner] > 0

    def _forget(self, memory_id: str) -> None:
        row = self.index.row_of(memory_id)
        if row is not None:
            self._columns.clear(row)
        self.index.remove(memory_id)
        item = self._items.pop(memory_id)
        self._owners[item.owner] -= 1
        del self._kinds[item.kind][memory_id]

    def _remember(self, item: MemoryItem, vector: Vectors | None) -> None:
        if item.memory_id in self._items:
            self._forget(item.memory_id)
        self.index.add(item.memory_id, item.text, item.created_ms, vector, embed=False)
        row = self.index.row_of(item.memory_id)
        assert row is not None
        self._columns.set(row, item)
        self._items[item.memory_id] = item
        self._owners[item.owner] += 1
        self._kinds.setdefault(item.kind, {})[item.memory_id] = item

    def refresh(self) -> None:
        """Re-read the table if a commit wrote it since the last look."""
        version = self._store.table_version(TABLE)
        if version == self._seen and version != -1:
            return
        self._seen = version
        stored = {item.memory_id: item for item in scan_items(self._store)}
        for gone in set(self._items) - set(stored):
            self._forget(gone)
        fresh = [item for mid, item in stored.items() if self._items.get(mid) != item]
        if not fresh:
            return
        if self._remote:  # no network here: embedded by the next async call
            for item in fresh:
                self._remember(item, None)
            return
        vectors = self._embedder.embed([item.text for item in fresh])
        for item, vector in zip(fresh, vectors, strict=True):
            self._remember(item, vector)

    def _failed(self, what: str, exc: PalyraError) -> None:
        if not self.last_error:  # once per outage, not once per item
            _log.warning("memory embedding failed; items are kept and embedded later",
                         what=what, error=str(exc), pending=len(self._pending()),
                         space=self.index.space)
        self.last_error = f"{what}: {exc}"

    async def _aembed(self, texts: list[str], what: str) -> Vectors | None:
        """Vectors for ``texts`` (None when a remote embedder failed; logged)."""
        embedder: Any = self._embedder
        if not self._remote:
            vectors: Vectors = embedder.embed(texts)
            return vectors
        try:
            vectors = await embedder.aembed(texts)
        except PalyraError as exc:
            self._failed(what, exc)
            return None
        if self.last_error:
            _log.info("memory embedding works again", pending=len(self._pending()))
        self.last_error = ""
        return vectors

    async def embed_pending(self, limit: int = PENDING_BATCH) -> int:
        """Embed up to ``limit`` items that are indexed without a vector; how many got one."""
        if not self._pending():
            return 0
        ids = sorted(self._pending())[:limit]
        vectors = await self._aembed([self._items[m].text for m in ids], "pending items")
        if vectors is None:
            return 0
        for memory_id, vector in zip(ids, vectors, strict=True):
            if memory_id in self._items:  # not deleted while we waited
                self.index.set_vector(memory_id, vector)
        return len(ids)

    def _cached(self, query: str) -> Vectors | None:
        vector = self._queries.get(query)
        if vector is not None:
            self._queries.move_to_end(query)
        return vector

    def _cache(self, query: str, vector: Vectors) -> Vectors:
        self._queries[query] = vector
        if len(self._queries) > QUERY_CACHE:
            self._queries.popitem(last=False)
        return vector

    def _query_vector(self, query: str) -> Vectors | None:
        """The query's vector (blocking: one attempt for a remote embedder)."""
        vector = self._cached(query)
        if vector is not None:
            return vector
        try:
            vector = self._embedder.embed([query])[0]
        except PalyraError as exc:
            self._failed("query", exc)
            return None
        self.last_error = ""
        return self._cache(query, vector)

    # -- writes --------------------------------------------------------------
    async def ingest(self, owner: str, text: str, *, session_id: str = "", scope: str = "",
                     tags: list[str] | None = None, confidence_bps: int = 10_000,
                     ttl_ms: int = 0, device_id: str = "", agent_id: str = "") -> MemoryItem:
        """Store one item (its provenance is the ingest event itself)."""
        text = text.strip()
        if not text or len(text) > MAX_TEXT:
            raise InvalidArgument(f"memory text must be 1..{MAX_TEXT} characters")
        tags = [t for t in (tags or []) if t][:MAX_TAGS]
        embedded = await self._aembed([text], "ingest")  # before the commit: no lock held
        now = self._now()
        event_id = new_ulid(now)
        item = MemoryItem(
            memory_id=new_ulid(now), kind="note", text=text, owner=owner,
            scope=scope or ("agent" if agent_id else "session" if session_id else "principal"),
            session_id=session_id, agent_id=agent_id,
            tags=tags, confidence_bps=max(0, min(10_000, confidence_bps)),
            expires_ms=min(now + ttl_ms, MAX_EXPIRES_MS) if ttl_ms > 0 else 0, created_ms=now,
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
            self._remember(item, embedded[0] if embedded is not None else None)
            self._seen = before + 1
        else:
            self.refresh()
            if embedded is not None and item.memory_id in self.index.pending:
                self.index.set_vector(item.memory_id, embedded[0])
        if self._remote and embedded is not None:
            await self.embed_pending()  # the endpoint answers: catch up
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
                agent_id: str = "") -> Visibility:
        """Which items a caller sees (in ``session_id`` and for ``agent_id``'s runs, when
        given): its own principal-wide items, its items of that session, and its items
        scoped to that agent. A predicate on items, which search applies as a row mask."""
        return Visibility(principal, session_id, everyone, agent_id, self._now())

    def search(self, query: str, sees: Callable[[MemoryItem], bool], *, limit: int = 10,
               min_score_bps: int = 0) -> list[tuple[MemoryItem, Hit]]:
        """Hybrid search over what ``sees`` admits, best first.

        With a remote embedder this blocks on one embeddings request for an uncached
        query (and ranks without the vector part if it fails); async callers use
        :meth:`asearch`.
        """
        self.refresh()
        if not self._items or not query.strip():
            return []
        return self._ranked(query, self._query_vector(query), sees, limit, min_score_bps)

    async def asearch(self, query: str, sees: Callable[[MemoryItem], bool], *,
                      limit: int = 10, min_score_bps: int = 0) -> list[tuple[MemoryItem, Hit]]:
        """:meth:`search` for async callers: a remote embedder's requests are awaited
        (pending items are embedded first), never blocking the event loop."""
        self.refresh()
        if not self._items or not query.strip():
            return []
        if not self._remote:
            return self.search(query, sees, limit=limit, min_score_bps=min_score_bps)
        await self.embed_pending()
        vector = self._cached(query)
        if vector is None:
            got = await self._aembed([query], "query")
            vector = self._cache(query, got[0]) if got is not None else None
        return self._ranked(query, vector, sees, limit, min_score_bps)

    @property
    def item_count(self) -> int:
        """Items indexed (for ``/metrics``)."""
        return len(self._items)

    def _ranked(self, query: str, vector: Vectors | None, sees: Callable[[MemoryItem], bool],
                limit: int, min_score_bps: int) -> list[tuple[MemoryItem, Hit]]:
        began = time.perf_counter()
        try:
            return self._rank(query, vector, sees, limit, min_score_bps)
        finally:
            self.search_seconds.observe(time.perf_counter() - began)

    def _rank(self, query: str, vector: Vectors | None, sees: Callable[[MemoryItem], bool],
              limit: int, min_score_bps: int) -> list[tuple[MemoryItem, Hit]]:
        items = self._items
        if isinstance(sees, Visibility):  # the common case: one mask, no per-row calls
            hits = self.index.search(query, self._now(), limit=limit, query_vector=vector,
                                     embed=False,
                                     mask=self._columns.mask(sees, self.index.used))
        else:
            hits = self.index.search(query, self._now(), limit=limit, query_vector=vector,
                                     embed=False,
                                     allowed=lambda mid: mid in items and sees(items[mid]))
        return [(items[h.memory_id], h) for h in hits if h.score_bps >= min_score_bps]

    def start(self) -> None:
        """With a remote embedder, embed items without a vector in the background: all of
        them after a start, those of an outage once the endpoint answers, those other
        code wrote (learning). A local embedder needs no loop."""
        if self._remote and self._catching_up is None:
            self._catching_up = asyncio.get_running_loop().create_task(self._catch_up())

    async def _catch_up(self) -> None:
        while True:
            self.refresh()
            if self._pending() and await self.embed_pending():
                await asyncio.sleep(0)  # the next batch at once, but let others run
                continue
            await asyncio.sleep(CATCH_UP_S)  # nothing to do, or failing: look again later

    async def aclose(self) -> None:
        """Stop the background loop and release the embedder's connections."""
        if self._catching_up is not None:
            self._catching_up.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._catching_up
            self._catching_up = None
        close = getattr(self._embedder, "aclose", None)
        if close is not None:
            await close()

    def of_kind(self, kind: str, sees: Callable[[MemoryItem], bool], *,
                limit: int) -> list[MemoryItem]:
        """The newest ``limit`` items of ``kind`` that ``sees`` admits (from memory)."""
        self.refresh()
        found = [i for i in self._kinds.get(kind, {}).values() if sees(i)]
        found.sort(key=lambda i: (i.created_ms, i.memory_id), reverse=True)
        return found[:limit]

    def page(self, sees: Callable[[MemoryItem], bool], *, after_id: str = "",
             limit: int = 100) -> tuple[list[MemoryItem], str]:
        """Items in id order after ``after_id``."""
        rows = [i for i in scan_items(self._store) if sees(i) and i.memory_id > after_id]
        page = rows[:limit]
        return page, (page[-1].memory_id if len(rows) > limit else "")
