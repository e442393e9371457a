"""The attachment store: content-addressed blobs, the runs' references, and their collection.

Storing and collecting take one lock, so a collection never drops a blob that a
reference committed while it was deciding (the collection reads the rows under
the lock and commits its deletes before letting go). Both are journal appends:
a crash leaves either the whole store commit or none of it, and either the
whole collection commit or none of it (``model.attachments`` has the rules).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import msgspec

from palyra.core.errors import ErrorCode, PalyraError
from palyra.engine.model.attachments import (
    ATTACHMENT_PREFIX,
    ATTACHMENT_TABLE,
    REF_PREFIX,
    RefRow,
    RunFacts,
    blob_key,
    collect,
    parse_ref_key,
    ref_key,
)
from palyra.engine.model.lifecycle import is_run_terminal
from palyra.engine.model.records import RUNS, RunRecord, decode
from palyra.journal import EntityWrite, EventDraft, JournalStore

_PAGE = 512
_DELETES_PER_COMMIT = 256
_FACTS_HELD = 4096
_REF = msgspec.json.Decoder(RefRow)


class AttachmentStore:
    """Blobs by SHA-256 in ``meta``, kept while a run's tape names them."""

    def __init__(self, store: JournalStore, now_ms: Callable[[], int]) -> None:
        self._store = store
        self._now_ms = now_ms
        self._lock = asyncio.Lock()

    def get(self, sha256: str) -> bytes | None:
        """An attachment's bytes, or None."""
        return self._store.get_entity(ATTACHMENT_TABLE, blob_key(sha256))

    async def put(self, principal: str, run_id: str,
                  blobs: Sequence[tuple[str, bytes]]) -> None:
        """Store ``(sha256, bytes)`` blobs (once each) and ``run_id``'s references to them,
        in one commit (``attachment.stored``)."""
        if not blobs:
            return
        async with self._lock:
            at = msgspec.json.encode(RefRow(self._now_ms()))
            writes: list[EntityWrite] = []
            stored: list[str] = []
            for sha256, data in dict(blobs).items():
                if self.get(sha256) is None:
                    writes.append(EntityWrite(ATTACHMENT_TABLE, blob_key(sha256), data))
                    stored.append(sha256)
                writes.append(EntityWrite(ATTACHMENT_TABLE, ref_key(sha256, run_id), at))
            await self._store.append([EventDraft(
                kind="attachment.stored", actor=principal, principal=principal, run_id=run_id,
                payload={"sha256": stored, "referenced": sorted({s for s, _d in blobs})},
                entity_writes=tuple(writes))])

    async def collect(self) -> int:
        """Drop the references and blobs retention let go; returns the blobs dropped."""
        async with self._lock:
            now = self._now_ms()
            facts: dict[str, RunFacts] = {}
            deletes: list[EntityWrite] = []
            dropped = 0
            group: list[tuple[str, str, int]] = []
            after = ""
            while True:
                rows = self._store.scan_entities(ATTACHMENT_TABLE, REF_PREFIX, after, _PAGE)
                for key, value in rows:
                    after = key
                    sha256, run_id = parse_ref_key(key)
                    if group and group[0][0] != sha256:
                        dropped += self._decide(group, facts, now, deletes)
                        group = []
                        await self._flush(deletes, final=False)
                    if run_id not in facts:
                        if len(facts) >= _FACTS_HELD:
                            facts.clear()  # a cache: memory stays bounded
                        facts[run_id] = self._facts(run_id)
                    group.append((sha256, run_id, _REF.decode(value).at_ms))
                if len(rows) < _PAGE:
                    break
            if group:
                dropped += self._decide(group, facts, now, deletes)
            await self._flush(deletes, final=True)
            return dropped

    @staticmethod
    def _decide(group: list[tuple[str, str, int]], facts: dict[str, RunFacts], now: int,
                deletes: list[EntityWrite]) -> int:
        dead_refs, dead_blobs = collect(group, facts, now)
        deletes += [EntityWrite(ATTACHMENT_TABLE, ref_key(s, r), None) for s, r in dead_refs]
        deletes += [EntityWrite(ATTACHMENT_TABLE, blob_key(s), None) for s in dead_blobs]
        return len(dead_blobs)

    async def _flush(self, deletes: list[EntityWrite], *, final: bool) -> None:
        if not deletes or (not final and len(deletes) < _DELETES_PER_COMMIT):
            return
        writes = tuple(deletes)
        deletes.clear()
        blobs = [w.key.removeprefix(ATTACHMENT_PREFIX) for w in writes
                 if not w.key.startswith(REF_PREFIX)]
        await self._store.append([EventDraft(
            kind="attachment.collected", actor="system:retention",
            principal="system:retention",
            payload={"sha256": blobs, "references": len(writes) - len(blobs)},
            entity_writes=writes)])

    def _facts(self, run_id: str) -> RunFacts:
        raw = self._store.get_entity(RUNS, run_id)
        if raw is None:
            return RunFacts(started=False)
        if not is_run_terminal(decode(RunRecord, raw).state):
            return RunFacts(started=True)
        last = self._store.last_tape_seq(run_id)
        try:
            self._store.read_tape(run_id, last - 1, 1)
        except PalyraError as exc:
            if exc.code is not ErrorCode.CURSOR_TRUNCATED:
                raise
            return RunFacts(started=True, terminal=True, tape_pruned=True)
        return RunFacts(started=True, terminal=True, tape_pruned=False)
