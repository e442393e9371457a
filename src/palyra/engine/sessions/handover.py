"""Session changes handed to the daemon that owns the session, through the journal.

Several daemons on one journal: only a session's owner writes its record. A
change asked on a daemon while another live daemon owns the session (a posture,
an archive, a branch, a reset without a run) is written as a ``meta`` row (``session_change:<session
id>:<change id>``, with a ``session.change_relayed`` event) instead of being
refused. The owner's inbox reader applies it under its lease and, in the same
commit, deletes the row and writes the answer row (``session_answer:<change
id>``); the asking daemon waits for that answer, then deletes it. A change
applied and its answer land together or not at all, so a crash at any instant
neither applies a change twice nor answers one that did not land. Where the
owner dies, whoever claims the orphaned session next applies the row.
"""

from __future__ import annotations

import asyncio

import msgspec

from palyra.core.errors import ErrorCode
from palyra.engine.model.errors import coded
from palyra.engine.model.records import IdentityRec, SessionRecord
from palyra.engine.model.tape import ENGINE_ACTOR
from palyra.journal import EntityWrite, EventDraft, JournalStore

CHANGE_TABLE = "meta"
CHANGE_PREFIX = "session_change:"
ANSWER_PREFIX = "session_answer:"
ANSWER_POLL_S = 0.02
"""How often the asking daemon looks for the owner's answer."""


class SessionChange(msgspec.Struct, frozen=True):
    """One handed-over change of a session made outside a run."""

    change_id: str
    session_id: str
    identity: IdentityRec
    kind: str
    """``posture``, ``archive``, ``branch`` or ``reset`` (a resolve's, without a run)."""
    tool_name: str = ""
    posture: str = ""
    label: str = ""
    branch_id: str = ""
    """A branch's new session id, chosen by the asker so it can read the branch after."""


class ChangeAnswer(msgspec.Struct, frozen=True):
    """The owner's answer: committed (``code`` empty) or refused with ``code``."""

    code: str = ""
    message: str = ""
    cleaned: bool = False
    """An archive: whether this change archived the session (it was not archived yet)."""
    previous_session_key: str = ""
    run_count: int = 0
    records: tuple[SessionRecord, ...] = ()
    """The session records as committed: the changed one (a branch: the new branch,
    then its changed source)."""

    def raise_refusal(self, session_id: str) -> None:
        """Raise the owner's refusal as the asker's own error, if it refused."""
        if self.code:
            raise coded(ErrorCode(self.code), self.message, session_id=session_id)


def change_key(change: SessionChange) -> str:
    """The row of one handed-over change."""
    return f"{CHANGE_PREFIX}{change.session_id}:{change.change_id}"


def answer_key(change_id: str) -> str:
    """The row of the owner's answer to one change."""
    return f"{ANSWER_PREFIX}{change_id}"


def change_draft(change: SessionChange) -> EventDraft:
    """The event that hands ``change`` to the session's owner (with its row)."""
    return EventDraft(
        kind="session.change_relayed", actor=ENGINE_ACTOR, session_id=change.session_id,
        principal=change.identity.principal,
        payload={"change_id": change.change_id, "change": change.kind},
        entity_writes=(EntityWrite(CHANGE_TABLE, change_key(change),
                                   msgspec.json.encode(change)),))


def answered(change: SessionChange, answer: ChangeAnswer) -> tuple[EntityWrite, ...]:
    """The writes that consume ``change`` and answer it (in the commit applying it)."""
    return (EntityWrite(CHANGE_TABLE, change_key(change), None),
            EntityWrite(CHANGE_TABLE, answer_key(change.change_id),
                        msgspec.json.encode(answer)))


def answer_draft(change: SessionChange, answer: ChangeAnswer) -> EventDraft:
    """An answer committed on its own: a refusal, or a change that had nothing to write."""
    return EventDraft(
        kind="session.change_answered", actor=ENGINE_ACTOR, session_id=change.session_id,
        payload={"change_id": change.change_id, "code": answer.code},
        entity_writes=answered(change, answer))


def decode_change(raw: bytes) -> SessionChange | None:
    """A row's change; None for a row this version cannot read (it is dropped)."""
    try:
        return msgspec.json.decode(raw, type=SessionChange)
    except msgspec.DecodeError:
        return None


async def hand_over(store: JournalStore, change: SessionChange, wait_s: float) -> ChangeAnswer:
    """Hand ``change`` to the session's owner; its answer once the owner committed it.

    Raises:
        PalyraError: ``UNAVAILABLE`` (retryable: the change stays handed over and
            lands when an owner applies it) when no answer came within ``wait_s``.
    """
    await store.append([change_draft(change)])
    key = answer_key(change.change_id)
    raw = await wait_for_row(store, CHANGE_TABLE, key, wait_s)
    if raw is None:
        raise coded(ErrorCode.UNAVAILABLE, f"the change of session {change.session_id} is "
                    "handed over to the daemon that owns it, which has not applied it yet",
                    session_id=change.session_id)
    await store.append([EventDraft(
        kind="session.change_done", actor=ENGINE_ACTOR, session_id=change.session_id,
        payload={"change_id": change.change_id},
        entity_writes=(EntityWrite(CHANGE_TABLE, key, None),))])
    return msgspec.json.decode(raw, type=ChangeAnswer)


async def wait_for_row(store: JournalStore, table: str, key: str, wait_s: float) -> bytes | None:
    """The row ``key`` once some daemon wrote it, or None after ``wait_s``.

    The row is the message: nothing depends on a notification, so this reads it
    every ``ANSWER_POLL_S``.
    """
    try:
        async with asyncio.timeout(wait_s):
            while True:
                raw = store.get_entity(table, key)
                if raw is not None:
                    return raw
                await asyncio.sleep(ANSWER_POLL_S)
    except TimeoutError:
        return None
