"""Session plans: what a get-or-create, reset or change of a session will commit.

Every change is planned as a ``SessionPlan`` (the new record plus the index
writes and journal events that carry it) and committed in one append. Run start
commits the plan together with the run's first tape events, so a new session
and its first run are one durable unit. Planning reads through a
``SessionReader`` and decides; it never writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from palyra.core.errors import ErrorCode
from palyra.core.ids import is_ulid, new_ulid
from palyra.engine.model.errors import coded, invalid
from palyra.engine.model.records import (
    SESSIONS,
    IdentityRec,
    SessionRecord,
    encode,
    session_index_key,
    session_key,
)
from palyra.engine.model.tape import ENGINE_ACTOR
from palyra.engine.sessions.reader import SessionReader
from palyra.engine.sessions.selectors import Selectors
from palyra.journal import EntityWrite, EventDraft

MAX_SELECTOR = 256


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
    return EventDraft(kind=kind, actor=ENGINE_ACTOR, session_id=record.session_id, payload=payload,
                      principal=ident.principal, device_id=ident.device_id,
                      channel=ident.channel)


def plan_resolve(reader: SessionReader, identity: IdentityRec, selectors: Selectors,
                 now_ms: int) -> SessionPlan:
    """Get-or-create a session: the plan, not yet committed.

    Call it under ``SessionWriter.resolving`` (which plans again under the lock).

    Raises:
        InvalidArgument: malformed selectors.
        PalyraError: ``STATE_CONFLICT`` for an id and key naming different
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
    found = reader.lookup(sel)
    now = now_ms
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
            raise coded(ErrorCode.STATE_CONFLICT, f"session {found.session_id} is archived",
                        session_id=found.session_id)
        record = found
        plan = SessionPlan(record)
        if sel.reset:
            # Reset keeps id, key and tape; it forgets the previous run
            # and every cached approval decision.
            record = msgspec.structs.replace(record, last_run_id="", grants={},
                                             updated_ms=now)
            plan = SessionPlan(record, reset_applied=True)
            plan.events.append(session_event("session.reset", record, {}))
    return plan


def check_identity(record: SessionRecord, identity: IdentityRec) -> None:
    """Raise SESSION_IDENTITY_MISMATCH unless ``identity`` owns the session."""
    if record.identity != identity:
        raise coded(ErrorCode.SESSION_IDENTITY_MISMATCH,
                    f"session {record.session_id} is bound to another principal, device "
                    "or channel", session_id=record.session_id)
