"""Agents and bindings in the journal's ``agents`` table; every change an ``agent.*`` event."""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from palyra.agents.model import AgentRecord, BindingRecord, validate_agent, validate_binding
from palyra.core.errors import NotFound
from palyra.core.ids import new_ulid
from palyra.journal import EntityWrite, EventDraft, JournalStore

TABLE = "agents"
_AGENT = "agent:"
_BINDING = "binding:"


def _now() -> int:
    return time.time_ns() // 1_000_000


class AgentRegistry:
    """Create, read, update, delete agents; bind and unbind them."""

    def __init__(self, store: JournalStore, *, now_ms: Callable[[], int] = _now) -> None:
        self._store = store
        self._now = now_ms
        # Every binding, as of a version of the table (JournalStore.table_version):
        # every new run asks which agent serves it, and a scan would wait for LMDB.
        self._all: tuple[int, list[BindingRecord]] | None = None

    def get(self, agent_id: str) -> AgentRecord | None:
        """The agent, or None."""
        raw = self._store.get_entity(TABLE, _AGENT + agent_id) if agent_id else None
        return msgspec.msgpack.decode(raw, type=AgentRecord) if raw is not None else None

    def require(self, agent_id: str) -> AgentRecord:
        """The agent.

        Raises:
            NotFound: no such agent.
        """
        rec = self.get(agent_id)
        if rec is None:
            raise NotFound(f"no agent {agent_id}", details={"agent_id": agent_id})
        return rec

    def page(self, after_id: str = "", limit: int = 100) -> tuple[list[AgentRecord], str]:
        """Agents in id order after ``after_id``; ``(page, next_after_id)``."""
        rows = self._store.scan_entities(TABLE, _AGENT, _AGENT + after_id if after_id else "",
                                         limit + 1)
        agents = [msgspec.msgpack.decode(v, type=AgentRecord) for _k, v in rows]
        page = agents[:limit]
        return page, (page[-1].agent_id if len(agents) > limit else "")

    def bindings(self, agent_id: str = "") -> list[BindingRecord]:
        """Every binding (of one agent, when given)."""
        if agent_id:
            return self._scan_bindings(agent_id)
        # Noted before the scan: a commit landing during it changes the version, so
        # what the scan saw is never served past a later write (-1: cannot know).
        version = self._store.table_version(TABLE)
        cached = self._all
        if cached is not None and cached[0] == version >= 0:
            return list(cached[1])
        out = self._scan_bindings("")
        self._all = (version, out) if version >= 0 else None
        return list(out)

    def _scan_bindings(self, agent_id: str) -> list[BindingRecord]:
        out: list[BindingRecord] = []
        after = ""
        prefix = _BINDING + (f"{agent_id}:" if agent_id else "")
        while True:
            rows = self._store.scan_entities(TABLE, prefix, after, 1000)
            out += [msgspec.msgpack.decode(v, type=BindingRecord) for _k, v in rows]
            if len(rows) < 1000:
                return out
            after = rows[-1][0]

    async def create(self, rec: AgentRecord, by: str) -> AgentRecord:
        """Store a new agent (a fresh id)."""
        now = self._now()
        rec = validate_agent(msgspec.structs.replace(rec, agent_id=new_ulid(now), created_ms=now,
                                                     updated_ms=now))
        await self._write("agent.created", rec.agent_id, by, (self._agent_write(rec),))
        return rec

    async def update(self, agent_id: str, rec: AgentRecord, by: str) -> AgentRecord:
        """Replace an agent's settings (id and creation time stay)."""
        old = self.require(agent_id)
        rec = validate_agent(msgspec.structs.replace(rec, agent_id=agent_id,
                                                     created_ms=old.created_ms,
                                                     updated_ms=self._now()))
        await self._write("agent.updated", agent_id, by, (self._agent_write(rec),))
        return rec

    async def delete(self, agent_id: str, by: str) -> bool:
        """Remove an agent and its bindings."""
        if self.get(agent_id) is None:
            return False
        writes = [EntityWrite(TABLE, _AGENT + agent_id, None)]
        writes += [EntityWrite(TABLE, f"{_BINDING}{agent_id}:{b.binding_id}", None)
                   for b in self.bindings(agent_id)]
        await self._write("agent.deleted", agent_id, by, tuple(writes))
        return True

    async def bind(self, agent_id: str, binding: BindingRecord, by: str) -> BindingRecord:
        """Add a binding to an existing agent."""
        self.require(agent_id)
        rec = validate_binding(msgspec.structs.replace(binding, agent_id=agent_id,
                                                       binding_id=new_ulid(self._now())))
        await self._write("agent.bound", agent_id, by, (EntityWrite(
            TABLE, f"{_BINDING}{agent_id}:{rec.binding_id}", msgspec.msgpack.encode(rec)),),
            binding_id=rec.binding_id)
        return rec

    async def unbind(self, agent_id: str, binding_id: str, by: str) -> bool:
        """Remove one binding."""
        key = f"{_BINDING}{agent_id}:{binding_id}"
        if self._store.get_entity(TABLE, key) is None:
            return False
        await self._write("agent.unbound", agent_id, by, (EntityWrite(TABLE, key, None),),
                          binding_id=binding_id)
        return True

    @staticmethod
    def _agent_write(rec: AgentRecord) -> EntityWrite:
        return EntityWrite(TABLE, _AGENT + rec.agent_id, msgspec.msgpack.encode(rec))

    async def _write(self, kind: str, agent_id: str, by: str,
                     writes: tuple[EntityWrite, ...], **extra: str) -> None:
        await self._store.append([EventDraft(
            kind=kind, actor=by, principal=by, payload={"agent_id": agent_id, **extra},
            entity_writes=writes)])
