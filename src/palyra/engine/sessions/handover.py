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

An asker does not wait forever, and a change it gave up on must never land: the row
carries a deadline on the database's clock (``core.clock.store_clock``), the end of the
asker's wait. The owner's commit and the asker's give-up are each a compare-and-set on
the row (it still holds the change as handed over): the owner's commit consumes it, the
asker's give-up deletes it, and only the first of the two lands. So either the owner
applied the change and the asker is answered with it, or the asker's give-up won and
the change is dropped. An owner never applies a row past its deadline (an asker that
died cannot give up), and drops it the same way: its commit stands on the deadline
too, judged on the database's clock inside that commit's transaction, so a row read in
time and committed late (the asker's give-up could not be committed) never lands.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgspec

from palyra.core.errors import ErrorCode, PalyraError
from palyra.engine.model.errors import coded
from palyra.engine.model.records import IdentityRec, SessionRecord
from palyra.engine.model.tape import ENGINE_ACTOR
from palyra.journal import EntityWrite, EventDraft, JournalStore, RowExpectation

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
    deadline_ms: int = 0
    """The end of the asker's wait, on the database's clock: no owner applies the change
    from then on (0: none, a row of an older daemon)."""


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


def expired(change: SessionChange, now_ms: int) -> bool:
    """Whether ``change``'s asker has stopped waiting for it (``now_ms``: the database's
    clock): it is then dropped, never applied."""
    return 0 < change.deadline_ms <= now_ms


def still_handed(change: SessionChange, raw: bytes) -> RowExpectation:
    """The condition of every commit that consumes ``change`` (its row ``raw`` as handed
    over is still there): the owner's apply and the asker's give-up, one of them lands."""
    return RowExpectation(CHANGE_TABLE, change_key(change), raw)


def applicable(change: SessionChange, raw: bytes) -> RowExpectation:
    """The condition of the owner's commit applying ``change``: its row is still as
    handed over, and the database's clock, read in that commit's transaction, is before
    the change's deadline. An owner that read the row in time and commits after the
    asker stopped waiting writes nothing, even when the asker's give-up itself could
    not be committed."""
    return RowExpectation(CHANGE_TABLE, change_key(change), raw, change.deadline_ms)


def withdrawn(change: SessionChange, exc: PalyraError) -> bool:
    """Whether ``exc`` is the refusal of a commit that found ``change``'s row gone (its
    asker gave up, or another owner consumed it first, or its deadline passed)."""
    return (exc.code is ErrorCode.STATE_CONFLICT
            and exc.details.get("key") == change_key(change))


def dropped_draft(change: SessionChange) -> EventDraft:
    """The event that deletes a change nobody may apply any more (past its deadline, or
    given up by its asker), answering nothing."""
    return EventDraft(
        kind="session.change_dropped", actor=ENGINE_ACTOR, session_id=change.session_id,
        payload={"change_id": change.change_id},
        entity_writes=(EntityWrite(CHANGE_TABLE, change_key(change), None),))


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


async def hand_over(store: JournalStore, change: SessionChange, wait_s: float,
                    now_ms: Callable[[], int]) -> ChangeAnswer:
    """Hand ``change`` to the session's owner; its answer once the owner committed it.

    ``now_ms``: the database's clock, on which the change's deadline is set ``wait_s``
    from now.

    Raises:
        PalyraError: ``UNAVAILABLE`` (retryable) when no owner applied the change within
            ``wait_s``: the change was withdrawn and never lands.
    """
    change = msgspec.structs.replace(change, deadline_ms=now_ms() + int(wait_s * 1000))
    raw = msgspec.json.encode(change)
    await store.append([change_draft(change)])
    key = answer_key(change.change_id)
    answer = await wait_for_row(store, CHANGE_TABLE, key, wait_s)
    if answer is None:
        answer = await _give_up(store, change, raw)
    if answer is None:
        raise coded(ErrorCode.UNAVAILABLE, f"the change of session {change.session_id} was "
                    "handed over to the daemon that owns it, which did not apply it in time; "
                    "it was withdrawn and will not be applied", session_id=change.session_id)
    await store.append([EventDraft(
        kind="session.change_done", actor=ENGINE_ACTOR, session_id=change.session_id,
        payload={"change_id": change.change_id},
        entity_writes=(EntityWrite(CHANGE_TABLE, key, None),))])
    return msgspec.json.decode(answer, type=ChangeAnswer)


async def _give_up(store: JournalStore, change: SessionChange, raw: bytes) -> bytes | None:
    """Withdraw ``change`` (its row ``raw``): None once withdrawn; the owner's answer when
    the owner consumed the row first (None too if it dropped it, past its deadline)."""
    try:
        await store.append([dropped_draft(change)], expect=(still_handed(change, raw),))
    except PalyraError as exc:
        if not withdrawn(change, exc):
            # The database is away: the row may stay, but no owner applies it past its
            # deadline, which is now.
            raise coded(ErrorCode.UNAVAILABLE, f"the change of session {change.session_id} "
                        "could not be withdrawn; it will not be applied",
                        session_id=change.session_id) from exc
        return store.get_entity(CHANGE_TABLE, answer_key(change.change_id), fresh=True)
    return None


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
