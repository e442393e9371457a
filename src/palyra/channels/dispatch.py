"""Dispatch: answer admitted messages (the ``channel.dispatch`` / ``channel.command`` handler).

A dispatch runs a batch of coalesced messages: to the conversation's active
run as input when there is one, else in a new run whose id *is* the task id,
so a dispatch repeated after a crash finds its run instead of starting a
second one. Replies go to the outbox as one ``channel.send`` task carrying
their chunks in order, whose idempotency keys derive from the run, so they are
queued once however often the dispatch runs. Per-channel slots bound the runs in flight; a message that
finds them all busy goes back to the durable retry queue, then to quarantine.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import msgspec

from palyra.agents import AgentRegistry, bound_agent
from palyra.agents.model import postures_for, route_for
from palyra.channels import notices, records
from palyra.channels.admission import ACTOR
from palyra.channels.commands import Commands, active_run, channel_identity
from palyra.channels.config import ChannelPolicy, ChannelsConfig
from palyra.channels.outbox import (
    SEND_ATTEMPTS,
    SEND_TASK,
    OutboundReply,
    queue_send,
    send_payloads,
)
from palyra.channels.recent import Recent
from palyra.channels.records import InboundRec
from palyra.channels.replies import split_utf8
from palyra.channels.routing import Envelope, prompt_text
from palyra.core.errors import ErrorCode, PalyraError
from palyra.core.redaction import is_clean, redact
from palyra.engine import (
    EndRider,
    Engine,
    IdentityRec,
    KeyedLocks,
    Riding,
    RunRecord,
    RunStateId,
    Selectors,
    SlotWaitTimeout,
    StartRun,
    is_run_terminal,
    member_from,
)
from palyra.journal import EntityWrite, EventDraft, JournalStore, Subscription
from palyra.tasks import Done, FollowUp, TaskQueue, TaskRecord
from palyra.tasks.queue import StagedSuccess
from palyra.tasks.worker import TaskContext

REPLIED = "tape.message_replied"
MAX_CONTEXT_LINES = 20
RECENT_OUTCOMES = 4096
APPROVAL_POLL_S = 0.25


@dataclass(slots=True)
class DispatchOutcome:
    """A finished dispatch, as RouteMessage answers it."""

    run_id: str = ""
    session_id: str = ""
    outputs: list[str] = field(default_factory=list)
    reason: str = ""
    delivered_to_active_run: bool = False


class ChannelBusy(Exception):
    """Every slot of the channel stayed busy; the task is retried later."""


Quarantine = Callable[[Envelope, str], Awaitable[None]]
Lookup = Callable[[str], InboundRec | None]


class _ChannelSlot:
    """One of a channel's run slots for an ``async with``: every slot staying busy past
    the wait is :class:`ChannelBusy` (a class, not a generator: one per message)."""

    __slots__ = ("_channel", "_hold")

    def __init__(self, channel: str, hold: AbstractAsyncContextManager[None]) -> None:
        self._channel, self._hold = channel, hold

    async def __aenter__(self) -> None:
        try:
            await self._hold.__aenter__()
        except SlotWaitTimeout:
            raise ChannelBusy(self._channel) from None

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._hold.__aexit__(kind, exc, tb)
        if isinstance(exc, SlotWaitTimeout):  # from the body, as the generator had it
            raise ChannelBusy(self._channel) from None


class Dispatcher:
    """Runs admitted messages and queues their replies; remembers recent outcomes."""

    def __init__(self, store: JournalStore, engine: Engine, tasks: TaskQueue,
                 commands: Commands, config: ChannelsConfig, *, message: Lookup,
                 quarantine: Quarantine, reply_caps: Mapping[str, int],
                 recent: Recent | None = None) -> None:
        self._store = store
        self._admitted = recent or Recent()  # what admission handed over in memory
        self._engine = engine
        self._tasks = tasks
        self._commands = commands
        self._config = config
        self._message = message
        self._quarantine = quarantine
        self._caps = reply_caps
        self._agents = AgentRegistry(store)
        self._slots = KeyedLocks()  # each channel's dispatch concurrency
        self._done: dict[str, asyncio.Future[DispatchOutcome]] = {}
        # Outcomes of the latest dispatches, for a RouteMessage caller that asks just
        # after the handler returned but before its task's success was committed.
        self._recent: OrderedDict[str, DispatchOutcome] = OrderedDict()

    # -- waiting for a dispatch (RouteMessage) --------------------------------
    async def outcome(self, task_id: str, timeout_s: float) -> DispatchOutcome | None:
        """The dispatch's outcome once its task ends (None if it is still going)."""
        if task_id in self._recent:
            return self._recent[task_id]
        task = self._tasks.get(task_id)
        if task is not None and task.final:
            return _outcome_of(task)
        future = self._done.setdefault(task_id, asyncio.get_running_loop().create_future())
        try:
            async with asyncio.timeout(timeout_s):
                return await asyncio.shield(future)
        except TimeoutError:
            return None  # the future stays: the dispatch's end still resolves it

    def _finished(self, task_id: str, outcome: DispatchOutcome) -> None:
        self._recent[task_id] = outcome
        while len(self._recent) > RECENT_OUTCOMES:
            self._recent.popitem(last=False)
        future = self._done.pop(task_id, None)
        if future is not None and not future.done():
            future.set_result(outcome)

    # -- dispatch --------------------------------------------------------------
    async def dispatch(self, ctx: TaskContext) -> Done:
        """Answer one coalesced batch of messages (a task handler)."""
        items = ctx.payload.get("items") or [ctx.payload]
        msgs = [m for m in (self._message(i["envelope_id"]) for i in items) if m is not None]
        if not msgs:
            return Done({"reason": "no_messages"})
        first = msgs[0]
        folded = _Folded()
        try:
            outcome = await self._answer(ctx, msgs, folded)
        except ChannelBusy:
            policy = self._config.policy_for(first.envelope.channel)
            if ctx.task.attempts <= policy.max_retries:
                raise
            for m in msgs:  # out of retries: keep them where an operator can see them
                await self._quarantine(m.envelope, "channel_busy")
            outcome = DispatchOutcome(reason="quarantined_channel_busy")
        self._admitted.dispatched([m.envelope.envelope_id for m in msgs])
        self._finished(ctx.task.task_id, outcome)
        if folded.done is not None:  # committed with the run's end (the worker knows)
            return folded.done
        return _success(ctx.task, first, outcome)

    def _answer(self, ctx: TaskContext, msgs: list[InboundRec], folded: _Folded
                ) -> Coroutine[Any, Any, DispatchOutcome]:
        # The part that answers, as its own coroutine (no frame of this one around it).
        if msgs[0].decision.action not in ("pair", "command"):
            return self._respond(ctx, msgs, folded)
        return self._command(msgs[0])

    async def _command(self, first: InboundRec) -> DispatchOutcome:
        if first.decision.action == "pair":
            text, reason = await self._commands.pair(first), "pairing"
        else:
            text, reason = await self._commands.command(first), "command"
        return DispatchOutcome(outputs=self._chunks(text, first), reason=reason)

    def _chunks(self, text: str, msg: InboundRec) -> list[str]:
        """``text`` cut to the channel's ``reply_max_bytes`` and the sink's own cap."""
        policy = self._config.policy_for(msg.envelope.channel)
        cap = self._caps.get(msg.sink, 0)
        room = min(policy.reply_max_bytes, cap) if cap else policy.reply_max_bytes
        return split_utf8(text, room, policy.reply_prefix)

    def _slot(self, channel: str, policy: ChannelPolicy) -> _ChannelSlot:
        # Kept only while a dispatch holds or waits for one: an operator may route
        # to any channel name, so names must not pile up for the daemon's life.
        return _ChannelSlot(channel, self._slots.hold(channel, slots=policy.concurrency,
                                                      wait_s=policy.slot_wait_s))

    async def _respond(self, ctx: TaskContext, msgs: list[InboundRec], folded: _Folded
                       ) -> DispatchOutcome:
        task = ctx.task
        env, decision = msgs[0].envelope, msgs[0].decision
        policy = self._config.policy_for(env.channel)
        identity = channel_identity(env.channel)
        text = "\n\n".join(prompt_text(m.envelope, policy) for m in msgs)
        active = active_run(self._engine, decision.session_key)
        # A dispatch claimed again after a crash finds its own run (its id is the task
        # id) still going: that run already has these messages, so it is only waited on.
        if active and active != task.task_id:
            with contextlib.suppress(PalyraError):  # it ended meanwhile: start a new run
                # The router starts its runs half-closed (they end once idle); a
                # message that arrives before that end still joins the run.
                await self._engine.send_input(identity, active, text, into_completing=True)
                return DispatchOutcome(run_id=active, reason="delivered_to_active_run",
                                       delivered_to_active_run=True)
        mark = self._admitted.context_mark(decision.session_key)
        context, ctx_keys, all_seen = (
            self._context_lines(decision.session_key, env.envelope_id) if mark is not None
            else ([], [], False))
        if context:
            text = ("Earlier in this conversation (not addressed to you):\n"
                    + "\n".join(context) + "\n\n" + text)
        async with self._slot(env.channel, policy):
            run_id = task.task_id  # a repeated dispatch finds its run
            # The run's tape as the writer commits it, from memory: its replies are
            # then read without going back to the journal (see _replies).
            tape = self._store.subscribe_tape(run_id)
            try:
                try:
                    agent_id = bound_agent(self._agents.bindings(), channel=env.channel,
                                           conversation_id=env.conversation_id,
                                           session_key=decision.session_key)
                    agent = self._agents.get(agent_id) if agent_id else None
                    await self._engine.start_run(identity, StartRun(
                        Selectors(session_key=decision.session_key), text=text, run_id=run_id,
                        driver="channel", complete=True,
                        # The task's first attempt: no earlier one can have started a
                        # run of its id, so the engine need not read the store to see
                        # (that read hands the GIL to the writer's thread, on the loop).
                        minted=task.attempts == 1,
                        agent_id=agent.agent_id if agent else "",
                        agent_postures=postures_for(agent, self._engine.tool_names())
                        if agent else {}, model_route=route_for(agent) if agent else (),
                        response_cache=agent.response_cache if agent else False,
                        # Context rows consumed by the run are an append of their own
                        # after it: then the success is committed after them, as before.
                        end_rider=None if ctx_keys else self._end_rider(ctx, msgs, tape,
                                                                        folded)))
                except PalyraError as exc:
                    if exc.code != ErrorCode.ALREADY_EXISTS:
                        raise
                record = await self._follow(identity, run_id, msgs[0])
                replies = (None if folded.done is not None
                           else _replies_seen(tape, record.tape_len))
            finally:
                self._store.unsubscribe(tape)
        if ctx_keys:
            await self._store.append([EventDraft(
                kind="channel.context_consumed", actor=ACTOR, run_id=run_id,
                payload={"count": len(ctx_keys)},
                entity_writes=tuple(EntityWrite(records.TABLE, k, None) for k in ctx_keys))])
        if mark is not None and all_seen:
            self._admitted.context_consumed(decision.session_key, mark)
        if folded.outcome is not None and folded.done is not None:
            return folded.outcome  # decided as the run ended, committed with its end
        if replies is None:  # the tape outgrew the buffer, or the run began earlier
            replies = self._replies(run_id)
        return self._ended(run_id, record, replies, msgs[0])

    def _ended(self, run_id: str, record: RunRecord, replies: list[str], first: InboundRec
               ) -> DispatchOutcome:
        """The outcome of a dispatch whose run ended as ``record`` with ``replies``."""
        if not replies and record.state in (RunStateId.FAILED, RunStateId.CANCELLED):
            # Say so on the platform rather than leave the sender with silence.
            replies = [f"Sorry, I could not answer that (the run {record.state}"
                       f"{': ' + record.end_reason if record.end_reason else ''})."]
        outputs: list[str] = []
        for reply in replies:
            outputs += self._chunks(reply, first)
        return DispatchOutcome(run_id=run_id, session_id=record.session_id, outputs=outputs,
                               reason=f"run_{record.state}")

    def _end_rider(self, ctx: TaskContext, msgs: list[InboundRec], tape: Subscription,
                   folded: _Folded) -> EndRider | None:
        """The dispatch's success, to ride in the commit that ends its run: the outcome,
        the replies' send task (born claimed by the outbox) and the worker's next claim,
        one commit fewer per message. A crash loses both or neither: before it, the
        dispatch is claimed again and finds its run; after it, the replies are queued.

        Only on the task's first attempt (a later one may find its run ended already)
        and while the run's earlier tape is all in ``tape``, for its earlier replies.
        """
        stage = ctx.stage_success
        if stage is None or ctx.task.attempts != 1:
            return None

        def ride(record: RunRecord, drafts: Sequence[EventDraft]) -> Riding | None:
            now = [d for d in drafts if d.tape]
            replies = _replies_seen(tape, record.tape_len - len(now))
            if replies is None:
                return None
            for draft in now:  # as the journal stores them: redacted
                if draft.kind == REPLIED:
                    # The journal's own test first (journal/write/prepare.py): a clean
                    # payload is stored as it is, so only a dirty one is redacted here.
                    payload = draft.payload
                    if not is_clean(payload):
                        payload = redact(dict(payload)).value
                    text = payload.get("replyText", "")
                    if text:
                        replies.append(text)
            outcome = self._ended(record.run_id, record, replies, msgs[0])
            done = _success(ctx.task, msgs[0], outcome)
            try:
                staged = stage(done.result, done.then)
            except PalyraError:
                return None  # refused on the worker's own path too, where it is reported
            if staged is None:
                return None
            folded.outcome, folded.done = outcome, done
            return _Riding(staged, folded)

        return ride

    async def _follow(self, identity: IdentityRec, run_id: str, first: InboundRec
                      ) -> RunRecord:
        """Wait for the run's end, telling the conversation of each tool approval the run
        waits on (who can decide it) and again when it is decided or times out."""
        if not first.sink:
            return await self._engine.wait_run(identity, run_id, until_terminal=True)
        while True:
            record = await self._engine.wait_run(identity, run_id)
            if is_run_terminal(record.state):
                return record
            approval_id = record.pending_approval_id
            if record.state != RunStateId.WAITING_FOR_APPROVAL or not approval_id:
                await asyncio.sleep(APPROVAL_POLL_S)  # settled but not ended: look again
                continue
            tool = self._approval(approval_id)[1]
            await self._notify(first, f"approval:{approval_id}:pending",
                               notices.approval_pending(approval_id, tool))
            # The engine has no "approval left pending" signal for a bystander; a parked
            # run is rare and slow (a human decides), so looking a few times a second
            # costs nothing that matters.
            while (record.pending_approval_id == approval_id
                   and not is_run_terminal(record.state)):
                await asyncio.sleep(APPROVAL_POLL_S)
                record = self._engine.get_run(identity, run_id)
            state = self._approval(approval_id)[0]
            await self._notify(first, f"approval:{approval_id}:{state}",
                               notices.approval_resolved(approval_id, tool, state))

    def _approval(self, approval_id: str) -> tuple[str, str]:
        approval = self._engine.approval_reader.get(approval_id)
        return (approval.state, approval.tool_name) if approval else ("ended", "a tool")

    async def _notify(self, first: InboundRec, key: str, text: str) -> None:
        await queue_send(self._tasks, [OutboundReply(
            sink=first.sink, key=f"{key}:{index}", text=chunk,
            conversation_id=first.envelope.conversation_id,
            thread_id=first.envelope.thread_id,
            reply_to=first.envelope.adapter_message_id,
            reply_token=first.envelope.reply_token)
            for index, chunk in enumerate(self._chunks(text, first))])

    def _context_lines(self, session_key: str, before: str
                       ) -> tuple[list[str], list[str], bool]:
        """The context lines for a run, the rows they come from (consumed by the run),
        and whether those are every context row the conversation has."""
        prefix = records.ctx_key(session_key, "")
        rows = self._store.scan_entities(records.TABLE, prefix, "", 1000)
        keys = [k for k, _v in rows if k[len(prefix):] < before][-MAX_CONTEXT_LINES:]
        lines = []
        for k in keys:
            msg = self._message(k[len(prefix):])
            if msg is not None:
                lines.append(f"{msg.envelope.sender_display or msg.envelope.sender}: "
                             f"{msg.envelope.text}")
        return lines, keys, len(keys) == len(rows)

    def _replies(self, run_id: str) -> list[str]:
        out: list[str] = []
        after = -1
        while True:
            page = self._store.read_tape_kept(run_id, after, 1000)
            for event in page.events:
                member = member_from(event.kind, event.payload)
                text = getattr(member, "reply_text", "")
                if type(member).__name__ == "MessageReplied" and text:
                    out.append(text)
            if page.next_after_seq is None:
                return out
            after = page.next_after_seq


@dataclass(slots=True)
class _Folded:
    """A dispatch's success as staged in its run's ending commit (None: not staged)."""

    outcome: DispatchOutcome | None = None
    done: Done | None = None


class _Riding:
    """A staged success riding in the run's end; if that commit fails, the dispatch
    decides its outcome again from how the run did end."""

    def __init__(self, staged: StagedSuccess, folded: _Folded) -> None:
        self._staged = staged
        self._folded = folded
        self.drafts = staged.drafts

    def land(self) -> None:
        self._staged.land()

    def abandon(self) -> None:
        self._folded.outcome = self._folded.done = None
        self._staged.abandon()


def _success(task: TaskRecord, first: InboundRec, outcome: DispatchOutcome) -> Done:
    """The dispatch's success: its outcome, and its replies queued in the same commit.

    No commit of their own, and a dispatch repeated after a crash queues them once (their
    keys). All of them ride in one send task (more only past its payload limit), which
    sends them in order: a long reply reads in order on the platform.
    """
    base = f"reply:{outcome.run_id or task.task_id}"
    sends = tuple(FollowUp(
        SEND_TASK, payload=payload, idempotency_key=payload["chunks"][0][0],
        max_attempts=SEND_ATTEMPTS,
        # The keys name this task's own run (its id) or this task: on its first
        # attempt no earlier success can have queued them, so none is looked up.
        new_key=task.attempts == 1)
        for payload in send_payloads([OutboundReply(
            sink=first.sink, key=f"{base}:{index}", text=text,
            conversation_id=first.envelope.conversation_id,
            thread_id=first.envelope.thread_id, reply_to=first.envelope.adapter_message_id,
            reply_token=first.envelope.reply_token)
            for index, text in enumerate(outcome.outputs)])) if first.sink else ()
    result: dict[str, Any] = msgspec.to_builtins(outcome)
    return Done(result, sends)


def _replies_seen(tape: Subscription, tape_len: int) -> list[str] | None:
    """The run's replies from its tape as buffered since before it started, or None when
    the buffer is not its first ``tape_len`` events (overflowed, lagging, or the run
    started before it)."""
    events = list(tape.buffer)
    if tape.overflowed or len(events) != tape_len or any(
            e.tape_seq != i for i, e in enumerate(events)):
        return None
    out: list[str] = []
    for event in events:
        if event.kind == REPLIED:
            text = getattr(member_from(event.kind, event.payload), "reply_text", "")
            if text:
                out.append(text)
    return out


def _outcome_of(task: TaskRecord) -> DispatchOutcome:
    if task.result_json:
        with contextlib.suppress(msgspec.ValidationError, msgspec.DecodeError):
            return msgspec.json.decode(task.result_json, type=DispatchOutcome)
    return DispatchOutcome(reason=f"dispatch_{task.state}")
