"""Messages for a run that lives on another daemon, handed over through the journal.

Several daemons on one journal: a run's actor lives on the daemon that owns its
session. A daemon asked to feed, complete or cancel a run it does not have
writes the request as a ``meta`` row (``run_inbox:<run id>:<id>``, with an
``run.input_relayed`` event) instead of refusing it. Every daemon's engine
reads that prefix every ``INBOX_POLL_S`` (one range read, usually empty) and
applies the rows of the runs it has live; an input is queued in the same
commit that deletes its row and writes its answer (``run_answer:<input id>``,
which the sender waits for), so it is taken exactly once, even across a crash
or a takeover (the new owner finds the row), and its sender is told only what
happened: queued, or refused as a local caller would be. A sender does not wait
forever: as a handed-over session change (``sessions.handover``), an input's row
carries a deadline on the database's clock, the owner's queueing commit and the
sender's give-up are each a compare-and-set on the row, and only one lands; an owner
drops an input past its deadline unqueued. Rows of runs that ended are
dropped by whichever daemon sees them; answers whose senders stopped waiting are
deleted by every daemon's sweep (``run.answer_sweep``). Starts of runs (``session_inbox:``) and
changes of sessions (``session_change:``, ``sessions.handover``) handed to a
session's owner are read here too, and applied where the session can be held.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import msgspec

from palyra.core.clock import store_clock
from palyra.core.errors import ErrorCode, PalyraError
from palyra.engine.model.errors import coded
from palyra.engine.model.lifecycle import is_run_terminal
from palyra.engine.model.records import (
    RUNS,
    AttachmentRec,
    IdentityRec,
    RunRecord,
    decode,
    redact_str,
)
from palyra.engine.model.tape import ENGINE_ACTOR
from palyra.engine.run.actor import RunActor
from palyra.engine.sessions.handover import (
    CHANGE_PREFIX,
    SessionChange,
    decode_change,
    wait_for_row,
)
from palyra.journal import EntityWrite, EventDraft, JournalStore, RowExpectation

INBOX_TABLE = "meta"
INBOX_PREFIX = "run_inbox:"
INBOX_POLL_S = 0.25
"""How often each daemon looks for messages handed over to its runs."""
INBOX_PAGE = 256

_log = logging.getLogger("palyra.engine")


class RelayedMessage(msgspec.Struct, frozen=True):
    """One handed-over request: an input (``text`` not None), a half-close, or a cancel."""

    input_id: str
    text: str | None = None
    attachments: tuple[AttachmentRec, ...] = ()
    complete: bool = False
    into_completing: bool = False
    cancel: str = ""
    """Non-empty: cancel the run, with this reason."""
    deadline_ms: int = 0
    """An input: the end of its sender's wait, on the database's clock; no owner queues
    it from then on (0: none; a half-close or a cancel, whose senders do not wait)."""


class RelayedStart(msgspec.Struct, frozen=True):
    """A new run for a session whose lease another daemon holds (``session_inbox:``).

    An API run, or a RunStream's: its stream stays on the asking daemon, which
    follows the tape (fed by the owner's commits) and hands the stream's inputs,
    half-close and decisions over like any other client's.
    """

    run_id: str
    session_id: str
    identity: IdentityRec
    text: str | None = None
    attachments: tuple[AttachmentRec, ...] = ()
    complete: bool = False
    agent_id: str = ""
    agent_postures: dict[str, str] = {}
    model_route: tuple[str, ...] = ()
    response_cache: bool = False
    token_budget: int = 0
    driver: str = "api"
    reset: bool = False
    """The start resets the session: the owner plans the reset under its lease."""


START_PREFIX = "session_inbox:"


def start_key(session_id: str, run_id: str) -> str:
    """The row of a handed-over run start (one per run id: a retried start overwrites it)."""
    return f"{START_PREFIX}{session_id}:{run_id}"


def start_draft(start: RelayedStart) -> EventDraft:
    """The event that hands a new run of ``start.session_id`` to the session's owner."""
    if start.text:
        start = msgspec.structs.replace(start, text=redact_str(start.text))
    return EventDraft(
        kind="session.run_relayed", actor=ENGINE_ACTOR, session_id=start.session_id,
        principal=start.identity.principal, payload={"run_id": start.run_id},
        entity_writes=(EntityWrite(INBOX_TABLE, start_key(start.session_id, start.run_id),
                                   msgspec.json.encode(start)),))


def inbox_key(run_id: str, message_id: str) -> str:
    """The row of one message for ``run_id``."""
    return f"{INBOX_PREFIX}{run_id}:{message_id}"


def run_of(key: str) -> str:
    """The run id a row's key names."""
    return key[len(INBOX_PREFIX):].split(":", 1)[0]


def message_draft(record: RunRecord, message: RelayedMessage, principal: str) -> EventDraft:
    """The event that hands ``message`` over to ``record``'s owner (with its row, keyed
    by ``message.input_id``: :func:`inbox_key`).

    No secret is journaled: the row holds the input redacted, the form a queued
    input has in the run record (and after any restart) anyway.
    """
    if message.text:
        message = msgspec.structs.replace(message, text=redact_str(message.text))
    return EventDraft(
        kind="run.input_relayed", actor=ENGINE_ACTOR, session_id=record.session_id,
        run_id=record.run_id, principal=principal,
        payload={"input_id": message.input_id, "complete": message.complete,
                 "cancel": message.cancel},
        entity_writes=(EntityWrite(INBOX_TABLE, inbox_key(record.run_id, message.input_id),
                                   msgspec.json.encode(message)),))


def decode_message(raw: bytes) -> RelayedMessage | None:
    """A row's message; None for a row this version cannot read (it is dropped)."""
    try:
        return msgspec.json.decode(raw, type=RelayedMessage)
    except msgspec.DecodeError:
        return None


def drop(key: str) -> EntityWrite:
    """Delete a message's row (in the commit that applies it)."""
    return EntityWrite(INBOX_TABLE, key, None)


ANSWER_PREFIX = "run_answer:"


class InputAnswer(msgspec.Struct, frozen=True):
    """The owner's answer to a handed-over input: queued (``code`` empty) or refused."""

    code: str = ""
    message: str = ""


def answer_key(input_id: str) -> str:
    """The row of the owner's answer to the input ``input_id``."""
    return f"{ANSWER_PREFIX}{input_id}"


def answer(message: RelayedMessage, code: str = "", text: str = "") -> tuple[EntityWrite, ...]:
    """The answer row of a handed-over input (none for a cancel or a half-close:
    they are idempotent, and their senders do not wait)."""
    if message.text is None:
        return ()
    return (EntityWrite(INBOX_TABLE, answer_key(message.input_id),
                        msgspec.json.encode(InputAnswer(code, text))),)


def still_handed(key: str, raw: bytes, deadline_ms: int = 0) -> RowExpectation:
    """The condition of every commit that consumes the message row ``key`` (``raw``, as
    handed over, is still there): the owner's queueing and the sender's give-up, one
    of them lands. ``deadline_ms`` (the owner's queueing): and the database's clock in
    that commit's transaction is before it."""
    return RowExpectation(INBOX_TABLE, key, raw, deadline_ms)


def withdrawn(key: str, exc: PalyraError) -> bool:
    """Whether ``exc`` refused a commit because the message row ``key`` is gone (its
    sender gave up, or another owner took it first)."""
    return exc.code is ErrorCode.STATE_CONFLICT and exc.details.get("key") == key


async def await_input_answer(store: JournalStore, run_id: str, handed: EventDraft,
                             input_id: str, wait_s: float) -> None:
    """Wait for the owner's answer to a handed-over input (``handed``: the event that
    handed it over, with its row), delete it, and raise the owner's refusal as the
    sender's own.

    Raises:
        PalyraError: the owner's refusal (``RUN_TERMINAL``: the run ended before the
            input reached it; ``RESOURCE_EXHAUSTED``: its queue is full …), or
            ``UNAVAILABLE`` (retryable) when no owner took it within ``wait_s``: the
            input was withdrawn and is never queued.
    """
    key = answer_key(input_id)
    raw = await wait_for_row(store, INBOX_TABLE, key, wait_s)
    if raw is None:
        raw = await _give_up(store, run_id, handed.entity_writes[0])
    if raw is None:
        raise coded(ErrorCode.UNAVAILABLE, f"the input was handed over to the daemon that "
                    f"owns run {run_id}, which did not take it in time; it was withdrawn "
                    "and will not be queued", run_id=run_id)
    await store.append([EventDraft(kind="run.input_answered", actor=ENGINE_ACTOR,
                                   run_id=run_id,
                                   entity_writes=(EntityWrite(INBOX_TABLE, key, None),))])
    answered = msgspec.json.decode(raw, type=InputAnswer)
    if answered.code:
        raise coded(ErrorCode(answered.code), answered.message, run_id=run_id)


async def _give_up(store: JournalStore, run_id: str, row: EntityWrite) -> bytes | None:
    """Withdraw the input whose row is ``row``: None once withdrawn; the owner's answer
    when the owner consumed the row first (None too if it dropped it unanswered)."""
    assert row.value is not None
    try:
        await store.append([EventDraft(kind="run.input_withdrawn", actor=ENGINE_ACTOR,
                                       run_id=run_id, entity_writes=(drop(row.key),))],
                           expect=(still_handed(row.key, row.value),))
    except PalyraError as exc:
        if not withdrawn(row.key, exc):
            # The database is away: the row may stay, but no owner queues it past its
            # deadline, which is now.
            raise coded(ErrorCode.UNAVAILABLE, "the input could not be withdrawn; it "
                        "will not be queued", run_id=run_id) from exc
        message = msgspec.json.decode(row.value, type=RelayedMessage)
        return store.get_entity(INBOX_TABLE, answer_key(message.input_id), fresh=True)
    return None


class InboxReader:
    """Applies handed-over messages to this daemon's live runs (one engine's loop)."""

    def __init__(self, store: JournalStore, live: Callable[[str], RunActor | None],
                 start: Callable[[RelayedStart, EntityWrite], Awaitable[bool]],
                 change: Callable[[SessionChange, bytes], Awaitable[bool]],
                 sweep: Callable[[], Awaitable[object]] | None = None,
                 now_ms: Callable[[], int] | None = None) -> None:
        self._store = store
        # The database's clock (``core.clock.store_clock``): an input past its
        # deadline is dropped, never queued.
        self._now_ms = now_ms or store_clock(store)
        self._sweep = sweep  # deletes answer rows of askers that timed out
        self._live = live
        self._start = start
        self._change = change

    async def keep(self) -> None:
        """Read the inbox every ``INBOX_POLL_S`` until cancelled."""
        while True:
            await asyncio.sleep(INBOX_POLL_S)
            try:
                await self.round()
            except Exception:  # the database is away: the next round tries again
                _log.warning("run inbox round failed", exc_info=True)

    async def round(self) -> None:
        """Apply the handed-over session changes and start the handed-over runs of the
        sessions this daemon can own; apply every message for a live run here; drop
        those of ended runs; now and then, delete answers nobody waits for."""
        if self._sweep is not None:
            await self._sweep()
        for key, raw in self._store.scan_entities(INBOX_TABLE, CHANGE_PREFIX, "", INBOX_PAGE):
            await self._change_one(key, raw)
        for key, raw in self._store.scan_entities(INBOX_TABLE, START_PREFIX, "", INBOX_PAGE):
            await self._start_one(key, raw)
        after = ""
        while True:
            rows = self._store.scan_entities(INBOX_TABLE, INBOX_PREFIX, after, INBOX_PAGE)
            for key, raw in rows:
                after = key
                await self._apply(key, raw)
            if len(rows) < INBOX_PAGE:
                return

    async def _apply(self, key: str, raw: bytes) -> None:
        run_id = run_of(key)
        actor = self._live(run_id)
        message = decode_message(raw)
        if actor is None:
            run = self._store.get_entity(RUNS, run_id)
            if message is None or run is None:
                await self._drop(key, run_id)
            elif is_run_terminal(state := decode(RunRecord, run).state):
                # The run ended before its input reached it: its sender, still
                # waiting, is refused as a local caller would have been.
                await self._drop(key, run_id, answer(
                    message, str(ErrorCode.RUN_TERMINAL), f"run {run_id} is {state}"))
            return  # another daemon's run (or one about to be taken over here)
        if message is None:
            await self._drop(key, run_id)
            return
        expect = (still_handed(key, raw),)
        try:
            if message.text is not None and 0 < message.deadline_ms <= self._now_ms():
                # Its sender has stopped waiting (or died): dropped, never queued.
                await self._drop(key, run_id, expect=expect)
                return
            if message.text is not None:  # queued in the commit that drops the row: once
                # ... and only before its deadline on the database's clock, judged in
                # that commit's transaction (read in time, committed late: not queued).
                await actor.add_input(message.text, message.input_id, message.attachments,
                                      message.complete, into_completing=message.into_completing,
                                      writes=(drop(key), *answer(message)),
                                      expect=(still_handed(key, raw, message.deadline_ms),))
                return
            # A cancel or a half-close is idempotent: applied, then dropped.
            if message.cancel:
                actor.request_cancel(message.cancel)
            else:
                await actor.request_complete()
            await self._drop(key, run_id)
        except PalyraError as exc:
            if exc.code is ErrorCode.LEASE_STALE or withdrawn(key, exc):
                return  # the run moved (its new owner applies it), or its sender gave up
            # Refused where a local caller would have been (the run is completing,
            # its queue is full): the waiting sender gets the same refusal.
            _log.warning("handed-over message for run %s refused: %s", run_id, exc.message)
            try:
                await self._drop(key, run_id, answer(message, str(exc.code), exc.message),
                                 expect=expect)
            except PalyraError as dropped:
                if not withdrawn(key, dropped):
                    raise  # else its sender gave up meanwhile: nothing to answer

    async def _drop(self, key: str, run_id: str,
                    answered: tuple[EntityWrite, ...] = (),
                    expect: tuple[RowExpectation, ...] = ()) -> None:
        await self._store.append([EventDraft(kind="run.input_dropped", actor=ENGINE_ACTOR,
                                             run_id=run_id,
                                             entity_writes=(drop(key), *answered))],
                                 expect=expect)

    async def _change_one(self, key: str, raw: bytes) -> None:
        change = decode_change(raw)
        if change is None:  # its asker times out retryably
            await self._store.append([EventDraft(kind="session.change_dropped",
                                                 actor=ENGINE_ACTOR,
                                                 entity_writes=(drop(key),))])
            return
        # Applied (the row consumed and answered in the change's commit) only where the
        # session's lease can be held: its owner, or anyone once it is free.
        await self._change(change, raw)

    async def _start_one(self, key: str, raw: bytes) -> None:
        try:
            start = msgspec.json.decode(raw, type=RelayedStart)
        except msgspec.DecodeError:
            start = None
        if start is None or self._store.get_entity(RUNS, start.run_id) is not None:
            await self._store.append([EventDraft(kind="session.run_dropped", actor=ENGINE_ACTOR,
                                                 entity_writes=(drop(key),))])
            return
        # Started (the row dropped in its accept commit) only where the session's
        # lease can be claimed: its owner, or anyone once it is free.
        await self._start(start, drop(key))
