"""Sessions: get-or-create by id/key/label, identity binding, reset, cleanup, branch.

Every change is planned under a per-session lock as a ``SessionPlan`` (the new
record plus the entity writes and journal events that carry it) and committed
in one append. Run start commits the plan together with the run's first tape
events, so a new session and its first run are one durable unit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

import msgspec

from palyra.core.errors import ErrorCode
from palyra.core.ids import is_ulid, new_ulid
from palyra.engine._errors import coded, invalid, not_found
from palyra.engine._locks import KeyedLocks
from palyra.engine._records import (
    SESSIONS,
    IdentityRec,
    SessionRecord,
    decode,
    encode,
    session_index_key,
    session_key,
)
from palyra.journal import EntityWrite, EventDraft, JournalStore

ACTOR = "system:engine"
MAX_SELECTOR = 256


@dataclass(frozen=True, slots=True)
class Selectors:
    """How a caller names a session; empty strings mean absent."""

    session_id: str = ""
    session_key: str = ""
    label: str = ""
    reset: bool = False
    require_existing: bool = False

    def trimmed(self) -> Selectors:
        """Selectors with surrounding whitespace removed (REFERENCE §6)."""
        return Selectors(self.session_id.strip(), self.session_key.strip(), self.label.strip(),
                         self.reset, self.require_existing)


@dataclass(slots=True)
class SessionPlan:
    """A session record to commit, with the index writes and events that carry it.

    ``entity_writes`` holds index rows only; the record itself is written by
    whoever commits the plan (run start writes an updated copy).
    """

    record: SessionRecord
    created: bool = False
    reset_applied: bool = False
    entity_writes: list[EntityWrite] = field(default_factory=list)
    events: list[EventDraft] = field(default_factory=list)


def record_write(record: SessionRecord) -> EntityWrite:
    """The entity write of a session record."""
    return EntityWrite(SESSIONS, session_key(record.session_id), encode(record))


def session_event(kind: str, record: SessionRecord, payload: dict[str, object]) -> EventDraft:
    """A non-tape journal event about a session (``session.*``)."""
    ident = record.identity
    return EventDraft(kind=kind, actor=ACTOR, session_id=record.session_id, payload=payload,
                      principal=ident.principal, device_id=ident.device_id,
                      channel=ident.channel)


class SessionService:
    """Reads and plans session changes; the caller commits plans."""

    def __init__(self, store: JournalStore, now_ms: Callable[[], int]) -> None:
        self._store = store
        self._now_ms = now_ms
        self.locks = KeyedLocks()

    # -- reads -------------------------------------------------------------
    def get(self, session_id: str) -> SessionRecord | None:
        """The session record, or None."""
        raw = self._store.get_entity(SESSIONS, session_key(session_id)) if session_id else None
        return decode(SessionRecord, raw) if raw is not None else None

    def require(self, session_id: str) -> SessionRecord:
        """The session record.

        Raises:
            NotFound: no such session.
        """
        record = self.get(session_id)
        if record is None:
            raise not_found("session", session_id)
        return record

    def by_key(self, key: str) -> SessionRecord | None:
        """The session currently holding ``key``, or None."""
        raw = self._store.get_entity(SESSIONS, session_index_key(key))
        return self.get(raw.decode()) if raw is not None else None

    def by_label(self, label: str) -> SessionRecord | None:
        """Most recently updated non-archived session with ``label`` (global lookup)."""
        best: SessionRecord | None = None
        after = ""
        while True:
            rows = self._store.scan_entities(SESSIONS, "id:", after, 1000)
            for _key, value in rows:
                rec = decode(SessionRecord, value)
                if rec.label == label and not rec.archived and (
                    best is None or rec.updated_ms > best.updated_ms
                ):
                    best = rec
            if len(rows) < 1000:
                return best
            after = rows[-1][0]

    def list_for(
        self, identity: IdentityRec, after_key: str, limit: int, include_archived: bool
    ) -> tuple[list[SessionRecord], str]:
        """Caller-scoped keyset page ordered by session key; returns (page, next_after_key)."""
        out: list[SessionRecord] = []
        cursor = session_index_key(after_key) if after_key else ""
        while len(out) < limit:
            rows = self._store.scan_entities(SESSIONS, "key:", cursor, 500)
            for key, value in rows:
                cursor = key
                rec = self.get(value.decode())
                if rec is None or rec.identity != identity:
                    continue
                if rec.archived and not include_archived:
                    continue
                out.append(rec)
                if len(out) >= limit:
                    break
            if len(rows) < 500:
                break
        more = len(out) >= limit and bool(
            self._store.scan_entities(SESSIONS, "key:", cursor, 1)
        )
        return out, (cursor[len("key:") :] if more else "")

    # -- planning ----------------------------------------------------------
    @asynccontextmanager
    async def resolving(self, selectors: Selectors) -> AsyncIterator[None]:
        """Hold the locks a get-or-create by ``selectors`` needs."""
        names = sorted({f"sel:{v}" for v in (selectors.session_id, selectors.session_key,
                                             selectors.label) if v} or {"sel:*new*"})
        async with AsyncExitStack() as stack:
            for name in names:
                await stack.enter_async_context(self.locks.hold(name))
            yield

    def plan_resolve(self, identity: IdentityRec, selectors: Selectors) -> SessionPlan:
        """Get-or-create a session (REFERENCE §6); hold :meth:`resolving` around plan+commit.

        Raises:
            InvalidArgument: malformed selectors, id and key naming different
                sessions, or an archived session.
            NotFound: ``require_existing`` and nothing matched.
            PalyraError: ``SESSION_IDENTITY_MISMATCH`` when the session is bound
                to another principal, device or channel.
        """
        sel = selectors.trimmed()
        for name, value in (("session_id", sel.session_id), ("session_key", sel.session_key),
                            ("session_label", sel.label)):
            if len(value) > MAX_SELECTOR:
                raise invalid(f"{name} is longer than {MAX_SELECTOR} characters", field=name)
        if sel.session_id and not is_ulid(sel.session_id):
            raise invalid("session_id must be a ULID", field="session_id")
        if sel.session_key.startswith("archived:"):
            raise invalid("session keys starting with 'archived:' are reserved",
                          field="session_key")
        found = self._lookup(sel)
        now = self._now_ms()
        if found is None:
            if sel.require_existing:
                raise coded(ErrorCode.NOT_FOUND, "no session matches the selectors "
                            "and require_existing is set")
            sid = sel.session_id or new_ulid()
            record = SessionRecord(session_id=sid, session_key=sel.session_key or sid,
                                   label=sel.label, identity=identity, created_ms=now,
                                   updated_ms=now)
            plan = SessionPlan(record, created=True)
            plan.entity_writes.append(EntityWrite(SESSIONS, session_index_key(
                record.session_key), sid.encode()))
            plan.events.append(session_event("session.created", record, {
                "session_key": record.session_key, "label": record.label}))
        else:
            check_identity(found, identity)
            if found.archived:
                raise invalid(f"session {found.session_id} is archived",
                              session_id=found.session_id)
            record = found
            plan = SessionPlan(record)
            if sel.reset:
                # Reset keeps id, key and tape; it forgets the previous run
                # and every cached approval decision (REFERENCE §6).
                record = msgspec.structs.replace(record, last_run_id="", grants={},
                                                 updated_ms=now)
                plan = SessionPlan(record, reset_applied=True)
                plan.events.append(session_event("session.reset", record, {}))
        return plan

    def _lookup(self, sel: Selectors) -> SessionRecord | None:
        by_id = self.get(sel.session_id) if sel.session_id else None
        if sel.session_key:
            by_key = self.by_key(sel.session_key)
            if sel.session_id and (by_id is not None or by_key is not None) and (
                by_id is None or by_key is None or by_id.session_id != by_key.session_id
            ):
                raise invalid("session_id and session_key name different sessions")
            return by_key
        if sel.session_id:
            return by_id
        if sel.label:
            return self.by_label(sel.label)
        return None

    async def commit(self, plan: SessionPlan) -> SessionRecord:
        """Commit a plan on its own (API calls that start no run)."""
        events = list(plan.events) or [session_event("session.resolved", plan.record, {})]
        last = events[-1]
        events[-1] = dataclasses.replace(
            last,
            entity_writes=(*last.entity_writes, *plan.entity_writes, record_write(plan.record)),
        )
        await self._store.append(events)
        return plan.record


def check_identity(record: SessionRecord, identity: IdentityRec) -> None:
    """Raise SESSION_IDENTITY_MISMATCH unless ``identity`` owns the session."""
    if record.identity != identity:
        raise coded(ErrorCode.SESSION_IDENTITY_MISMATCH,
                    f"session {record.session_id} is bound to another principal, device "
                    "or channel", session_id=record.session_id)
