"""Post-run reflection: queue it when a run ends done, run it as a background task,
and review what it proposed.

``on_run_end`` queues a ``post_run_reflection`` task (priority 25, one attempt,
30 min expiry) for a sampled run, unless the session had one queued less than the
cooldown ago (read back from the task table once, so it holds across restarts; the
run id is the idempotency key, so a run is never reflected on twice). The task reads
the run's tape from the journal, asks the run's own model route with
:data:`~palyra.learning.model.REFLECTION_PROMPT`, adds the procedures it finds
itself, and journals every candidate in one commit (``learning.candidate``
events; candidates and any auto-applied memory items in the ``memory``
table). Candidate ids are deterministic, so a reflection that runs twice
writes nothing new.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from palyra.core.errors import ErrorCode, NotFound, PalyraError, PermissionDenied
from palyra.engine import IdentityRec, RunRecord, RunStateId, member_from
from palyra.journal import EntityWrite, EventDraft, JournalStore, StoredEvent
from palyra.learning import model
from palyra.learning.config import LearningConfig
from palyra.learning.model import Candidate, Proposal, State
from palyra.memory import MemoryItem, Provenance, item_write, source_digest
from palyra.providers import (
    ChatMessage,
    ModelProvider,
    ModelRequest,
    ProviderConfig,
    ProviderRegistry,
    complete_routed,
)
from palyra.tasks import TaskContext, TaskQueue

TASK_KIND = "post_run_reflection"
TABLE = "memory"
_CANDIDATE = "candidate:"
# fingerprint (model.fingerprint) -> the candidate id that first proposed it.
_PROPOSED = "proposed:"
ACTOR = "system:learning"
PRIORITY = 25
TTL_MS = 30 * 60_000


def _now() -> int:
    return time.time_ns() // 1_000_000


class Learning:
    """Reflection (queue and run) and review, over one journal and provider."""

    def __init__(self, store: JournalStore, provider: ModelProvider, config: LearningConfig,
                 *, now_ms: Callable[[], int] = _now,
                 models: ProviderRegistry | None = None) -> None:
        self._store = store
        # A reflection asks the reflected run's own route (its agent's provider and
        # model) through ``models``; without a registry, ``provider`` serves all.
        self._models = models or ProviderRegistry(
            [(ProviderConfig(name=provider.name), provider)])
        self.config = config
        self._now = now_ms
        self._last: dict[str, int] | None = None  # session -> last reflection queued (ms)

    # -- queueing ------------------------------------------------------------
    async def on_run_end(self, record: RunRecord, tasks: TaskQueue) -> str | None:
        """Queue a reflection for a run that ended done; the task id, or None."""
        cfg = self.config
        if (not cfg.enabled or record.state != RunStateId.DONE
                or not model.sampled(record.run_id, cfg.sampling_percent)):
            return None
        last = self._last_reflections(tasks)
        now = self._now()
        if now - last.get(record.session_id, -(1 << 62)) < cfg.cooldown_s * 1000:
            return None
        last[record.session_id] = now
        task, created = await tasks.enqueue(
            TASK_KIND, payload={"run_id": record.run_id, "session_id": record.session_id,
                                "principal": record.identity.principal,
                                "route": list(record.model_route)},
            priority=PRIORITY, max_attempts=1, ttl_ms=TTL_MS,
            idempotency_key=f"reflect:{record.run_id}")
        return task.task_id if created else None

    def _last_reflections(self, tasks: TaskQueue) -> dict[str, int]:
        if self._last is None:
            last: dict[str, int] = {}
            for task in tasks.page(kind=TASK_KIND, limit=1_000_000)[0]:
                session = str(msgspec.json.decode(task.payload_json).get("session_id", ""))
                last[session] = max(last.get(session, 0), task.created_ms)
            self._last = last
        return self._last

    # -- the task ------------------------------------------------------------
    async def reflect(self, ctx: TaskContext) -> dict[str, object]:
        """The ``post_run_reflection`` handler."""
        run_id = str(ctx.payload["run_id"])
        events = self._tape(run_id)
        by_seq = {e.tape_seq: e for e in events}
        lines, calls = _conversation(events)
        route = [str(label) for label in ctx.payload.get("route") or ()]
        answer = await complete_routed(self._models.resolve(route), ModelRequest(messages=[
            ChatMessage(role="system", content=model.REFLECTION_PROMPT),
            ChatMessage(role="user", content=model.transcript(lines))], tools=[]))
        response = answer.response
        proposals = [*model.parse_reflection(response.text, set(by_seq)), *model.procedures(calls)]
        now = self._now()
        principal = str(ctx.payload.get("principal", ""))
        drafts: list[EventDraft] = []
        kept: list[Candidate] = []
        seen: set[str] = set()
        for proposal in proposals[: model.MAX_CANDIDATES]:
            cand = self._candidate(proposal, ctx, by_seq, principal, now)
            if cand is None or self._stored(cand.candidate_id) is not None:
                continue
            mark = model.fingerprint(principal, cand.kind, cand.text)
            if mark in seen or self._store.get_entity(TABLE, _PROPOSED + mark) is not None:
                continue  # proposed before (another run, any state): not again
            seen.add(mark)
            writes = [_candidate_write(cand),
                      EntityWrite(TABLE, _PROPOSED + mark, cand.candidate_id.encode())]
            if cand.state == State.APPLIED:
                writes.append(item_write(_memory_item(cand, now)))
            drafts.append(EventDraft(
                kind="learning.candidate", actor=ACTOR, session_id=cand.session_id,
                payload={"candidate_id": cand.candidate_id, "kind": cand.kind,
                         "state": cand.state, "confidence_bps": cand.confidence_bps,
                         "tape_seqs": cand.tape_seqs, "memory_id": cand.memory_id},
                entity_writes=tuple(writes)))
            kept.append(cand)
        if drafts:
            await self._store.append(drafts)
        return {"candidates": len(kept),
                "applied": sum(1 for c in kept if c.state == State.APPLIED)}

    def _tape(self, run_id: str) -> list[StoredEvent]:
        # What retention left of it (a run pruned before its reflection ran
        # is reflected on from its earliest kept event, not failed).
        events: list[StoredEvent] = []
        after = -1
        while True:
            page = self._store.read_tape_kept(run_id, after, 1000)
            events += page.events
            if page.next_after_seq is None:
                return events
            after = page.next_after_seq

    def _candidate(self, proposal: Proposal, ctx: TaskContext, by_seq: dict[int, StoredEvent],
                   principal: str, now: int) -> Candidate | None:
        state = model.initial_state(proposal.kind, proposal.confidence_bps)
        if state is None:
            return None
        sources = [by_seq[s] for s in proposal.tape_seqs]
        run_id = str(ctx.payload["run_id"])
        cid = model.candidate_id(run_id, proposal.kind, proposal.text)
        return Candidate(
            candidate_id=cid, kind=proposal.kind, text=proposal.text,
            confidence_bps=proposal.confidence_bps, state=state,
            session_id=str(ctx.payload.get("session_id", "")), run_id=run_id,
            principal=principal, tape_seqs=list(proposal.tape_seqs),
            positions=[e.position for e in sources], source_sha256=source_digest(sources),
            task_id=ctx.task.task_id, memory_id=_memory_id(cid) if state == State.APPLIED else "",
            decided_by=ACTOR if state == State.APPLIED else "",
            decided_ms=now if state == State.APPLIED else 0,
            reason="at or above the auto-write threshold" if state == State.APPLIED else "",
            created_ms=now)

    # -- review --------------------------------------------------------------
    def _stored(self, candidate_id: str) -> Candidate | None:
        raw = self._store.get_entity(TABLE, _CANDIDATE + candidate_id) if candidate_id else None
        return msgspec.msgpack.decode(raw, type=Candidate) if raw is not None else None

    def candidates(self, *, state: str = "", run_id: str = "", limit: int = 100,
                   visible: Callable[[Candidate], bool] = lambda c: True) -> list[Candidate]:
        """Newest first."""
        out: list[Candidate] = []
        after = ""
        while True:
            rows = self._store.scan_entities(TABLE, _CANDIDATE, after, 1000)
            for _key, value in rows:
                cand = msgspec.msgpack.decode(value, type=Candidate)
                if ((not state or cand.state == state) and (not run_id or cand.run_id == run_id)
                        and visible(cand)):
                    out.append(cand)
            if len(rows) < 1000:
                break
            after = rows[-1][0]
        return sorted(out, key=lambda c: (c.created_ms, c.candidate_id), reverse=True)[:limit]

    async def review(self, identity: IdentityRec, candidate_id: str, accept: bool, reason: str,
                     allowed: Callable[[Candidate, str], tuple[bool, str]]) -> Candidate:
        """Accept (write the memory item) or reject a pending candidate.

        ``allowed(candidate, decision)`` is the Cedar check ``learning.review``.

        Raises:
            NotFound: no such candidate (or one the caller may not see).
            PermissionDenied: Cedar said no.
            PalyraError: ``CANDIDATE_ALREADY_DECIDED`` when it is no longer pending.
        """
        cand = self._stored(candidate_id)
        if cand is None:
            raise NotFound(f"no learning candidate {candidate_id}",
                           details={"candidate_id": candidate_id})
        decision = "accept" if accept else "reject"
        ok, why = allowed(cand, decision)
        if not ok:
            raise PermissionDenied(why, details={"candidate_id": candidate_id})
        if cand.state != State.PENDING_REVIEW:
            raise PalyraError(f"candidate {candidate_id} is already {cand.state}",
                              code=ErrorCode.CANDIDATE_ALREADY_DECIDED,
                              details={"candidate_id": candidate_id, "state": cand.state})
        now = self._now()
        new = msgspec.structs.replace(
            cand, state=State.ACCEPTED if accept else State.REJECTED,
            decided_by=identity.principal, decided_ms=now, reason=reason[:500],
            memory_id=_memory_id(cand.candidate_id) if accept else "")
        writes: list[EntityWrite] = [_candidate_write(new)]
        if accept:
            writes.append(item_write(_memory_item(new, now)))
        await self._store.append([EventDraft(
            kind=f"learning.{'accepted' if accept else 'rejected'}", actor=identity.principal,
            principal=identity.principal, device_id=identity.device_id,
            session_id=cand.session_id,
            payload={"candidate_id": candidate_id, "reason": new.reason,
                     "memory_id": new.memory_id},
            entity_writes=tuple(writes))])
        return new


def _conversation(events: list[StoredEvent]) -> tuple[list[tuple[int, str, str]],
                                                       list[tuple[int, str]]]:
    """``(seq, role, text)`` lines for the prompt and ``(seq, tool)`` calls in order."""
    lines: list[tuple[int, str, str]] = []
    calls: list[tuple[int, str]] = []
    for event in events:
        member = member_from(event.kind, event.payload)
        name = type(member).__name__
        if name == "UserInput":
            lines.append((event.tape_seq, "user", member.text))  # type: ignore[union-attr]
        elif name == "MessageReplied":
            lines.append((event.tape_seq, "assistant", member.reply_text))  # type: ignore[union-attr]
        elif name == "ToolProposal":
            calls.append((event.tape_seq, member.tool_name))  # type: ignore[union-attr]
            lines.append((event.tape_seq, "tool call",
                          f"{member.tool_name} {member.input_json}"))  # type: ignore[union-attr]
    return lines, calls


def _memory_id(candidate_id: str) -> str:
    return "mem" + candidate_id[2:]


def _memory_item(cand: Candidate, now: int) -> MemoryItem:
    return MemoryItem(
        memory_id=_memory_id(cand.candidate_id), kind=cand.kind, text=cand.text,
        scope="principal", owner=cand.principal, created_ms=now,
        provenance=Provenance(session_id=cand.session_id, run_id=cand.run_id,
                              tape_seqs=cand.tape_seqs, positions=cand.positions,
                              sha256=cand.source_sha256,
                              source=f"learning:{cand.candidate_id}"))


def _candidate_write(cand: Candidate) -> EntityWrite:
    return EntityWrite(TABLE, _CANDIDATE + cand.candidate_id, msgspec.msgpack.encode(cand))
