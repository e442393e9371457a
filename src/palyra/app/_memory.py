"""MemoryService: ingest, search, get, list, delete, purge (no model on the write path).

Callers see their own items (operators: everyone's); session-scoped items only in
their session. Delete and purge are sensitive: Cedar ``memory.delete`` / ``memory.purge``,
operators only by the shipped policy.
"""

from __future__ import annotations

import time

from palyra_gen.palyra import v1 as pb

from palyra.app._access import is_operator
from palyra.app._base import AppBase
from palyra.app._convert import identity_of
from palyra.app.context import CallContext
from palyra.core.errors import InvalidArgument, NotFound, PermissionDenied
from palyra.engine import IdentityRec, may_access
from palyra.memory import MemoryItem
from palyra.memory.service import Memory

MAX_PAGE = 500
SCOPES = ("", "principal", "session", "agent")


def item_proto(item: MemoryItem) -> pb.MemoryItem:
    """The wire form of an item, with its provenance."""
    p = item.provenance
    return pb.MemoryItem(
        memory_id=item.memory_id, session_id=item.session_id, text=item.text,
        source=p.source, tags=list(item.tags), confidence_bps=item.confidence_bps,
        created_at_unix_ms=item.created_ms, expires_at_unix_ms=item.expires_ms,
        kind=item.kind, scope=item.scope, owner=item.owner, agent_id=item.agent_id,
        provenance=pb.MemoryProvenance(session_id=p.session_id, run_id=p.run_id,
                                       tape_seqs=p.tape_seqs, positions=p.positions,
                                       sha256=p.sha256, source=p.source, event_id=p.event_id))


class MemoryApi(AppBase):
    """The MemoryService group."""

    memory: Memory | None = None

    def _memory(self) -> Memory:
        if self.memory is None:
            self.memory = Memory(self.store)
        return self.memory

    async def ingest_memory(self, ctx: CallContext,
                            request: pb.IngestMemoryRequest) -> pb.IngestMemoryResponse:
        """Store one item for the caller (deterministic: embedded and journaled)."""
        identity = identity_of(ctx)
        if request.item is None:
            raise InvalidArgument("item is required")
        given = request.item
        self._check_placement(identity, given)
        ttl_ms = max(0, given.expires_at_unix_ms - _now()) if given.expires_at_unix_ms else 0
        item = await self._memory().ingest(
            identity.principal, given.text, session_id=given.session_id, scope=given.scope,
            tags=list(given.tags), confidence_bps=given.confidence_bps or 10_000, ttl_ms=ttl_ms,
            device_id=identity.device_id, agent_id=given.agent_id)
        return pb.IngestMemoryResponse(item=item_proto(item))

    async def search_memory(self, ctx: CallContext,
                            request: pb.SearchMemoryRequest) -> pb.SearchMemoryResponse:
        """Hybrid search (lexical + vector + recency) over what the caller sees."""
        identity = identity_of(ctx)
        if not request.query.strip():
            raise InvalidArgument("query is required")
        memory = self._memory()
        sees = memory.visible(identity.principal, request.session_id,
                              everyone=is_operator(identity.principal))
        limit = 10 if request.limit == 0 else max(1, min(request.limit, 100))
        hits = await memory.asearch(request.query, sees, limit=limit,
                                    min_score_bps=request.min_score_bps)
        return pb.SearchMemoryResponse(hits=[pb.MemoryHit(item=item_proto(i), score_bps=h.score_bps)
                                             for i, h in hits])

    async def get_memory(self, ctx: CallContext,
                         request: pb.GetMemoryRequest) -> pb.GetMemoryResponse:
        """One item with its provenance (NOT_FOUND for another principal's)."""
        identity = identity_of(ctx)
        item = self._memory().get(request.memory_id)
        if item.owner != identity.principal and not is_operator(identity.principal):
            raise NotFound(f"no memory item {request.memory_id}",
                           details={"memory_id": request.memory_id})
        return pb.GetMemoryResponse(item=item_proto(item))

    async def list_memory(self, ctx: CallContext,
                          request: pb.ListMemoryRequest) -> pb.ListMemoryResponse:
        """The caller's items in id order (a session's, when given)."""
        identity = identity_of(ctx)
        memory = self._memory()
        sees = memory.visible(identity.principal, request.session_id,
                              everyone=is_operator(identity.principal))
        limit = 100 if request.limit == 0 else max(1, min(request.limit, MAX_PAGE))
        page, after = memory.page(sees, after_id=request.after_memory_id, limit=limit)
        return pb.ListMemoryResponse(items=[item_proto(i) for i in page],
                                     next_after_memory_id=after)

    async def delete_memory(self, ctx: CallContext,
                            request: pb.DeleteMemoryRequest) -> pb.DeleteMemoryResponse:
        """Remove one item (sensitive: operators)."""
        identity = identity_of(ctx)
        self._allowed(identity, "memory.delete", self._memory().get(request.memory_id).session_id
                      if request.memory_id else "", 1)
        return pb.DeleteMemoryResponse(
            deleted=await self._memory().delete(request.memory_id, identity.principal))

    async def purge_memory(self, ctx: CallContext,
                           request: pb.PurgeMemoryRequest) -> pb.PurgeMemoryResponse:
        """Remove every item, or a session's (sensitive: operators)."""
        identity = identity_of(ctx)
        self._allowed(identity, "memory.purge", request.session_id, 0)
        return pb.PurgeMemoryResponse(purged=await self._memory().purge(
            identity.principal, session_id=request.session_id))

    def _check_placement(self, identity: IdentityRec, given: pb.MemoryItem) -> None:
        """An item goes only where its owner may put it.

        Raises:
            InvalidArgument: an unknown scope, or a scope without what it names.
            NotFound: a session that does not exist or is another principal's (the same
                answer, so session ids cannot be probed), or an agent that does not exist.
        """
        if given.scope not in SCOPES:
            raise InvalidArgument(f"scope must be one of {', '.join(s for s in SCOPES if s)} "
                                  f"(or empty), not {given.scope!r}", details={"field": "scope"})
        if given.scope == "session" and not given.session_id:
            raise InvalidArgument("scope 'session' needs session_id",
                                  details={"field": "session_id"})
        if given.scope == "agent" and not given.agent_id:
            raise InvalidArgument("scope 'agent' needs agent_id", details={"field": "agent_id"})
        if given.session_id:
            session = self.engine.session_reader.get(given.session_id)
            if session is None or not may_access(identity, session.identity):
                raise NotFound(f"no session {given.session_id}",
                               details={"session_id": given.session_id})
        if given.agent_id and self._agent_registry.get(given.agent_id) is None:
            raise NotFound(f"no agent {given.agent_id}", details={"agent_id": given.agent_id})

    def _allowed(self, identity: IdentityRec, action: str, session_id: str, count: int) -> None:
        ok, why = self.engine.policy.memory_change(identity, action, session_id=session_id,
                                                   count=count)
        if not ok:
            raise PermissionDenied(why, details={"action": action})


def _now() -> int:
    return time.time_ns() // 1_000_000
