"""The channel router: admit inbound messages exactly once, dispatch them to runs.

Admission (:meth:`ChannelRouter.admit`) is one journal commit holding the
message, its routing decision, its dedupe key and (for messages to answer) the
``channel.dispatch`` task that will answer it. Only after that commit is the
platform acknowledged, so a crash before it loses nothing the platform
thinks was delivered (it redelivers), and a redelivery after it finds the
dedupe key and starts nothing (REFERENCE Part B 9; exactly one effect per
inbound event).

Dispatch (:meth:`ChannelRouter.dispatch`, a task handler) runs a batch of
coalesced messages: to the conversation's active run as input when there is
one, else in a new run whose id *is* the task id, so a dispatch repeated after
a crash finds its run instead of starting a second one. Replies go to the
outbox as ``channel.send`` tasks whose idempotency keys derive from the run,
so they are queued once however often the dispatch runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from palyra.agents import AgentRegistry, bound_agent
from palyra.agents.model import postures_for
from palyra.channels import records
from palyra.channels.config import ChannelsConfig
from palyra.channels.outbox import SEND_ATTEMPTS, SEND_TASK, OutboundReply
from palyra.channels.pairing import PairingBook
from palyra.channels.records import DedupeRec, InboundRec, QuarantineRec
from palyra.channels.replies import split_utf8
from palyra.channels.routing import (
    Decision,
    Envelope,
    Refused,
    coalesce_key,
    decide,
    normalize,
    prompt_text,
)
from palyra.core.errors import ErrorCode, PalyraError
from palyra.core.ids import new_ulid
from palyra.engine import (
    Engine,
    IdentityRec,
    KeyedLocks,
    RunStateId,
    Selectors,
    StartRun,
    member_from,
)
from palyra.journal import EntityWrite, EventDraft, JournalStore
from palyra.policy import PolicyGate
from palyra.tasks import TaskQueue, TaskRecord
from palyra.tasks.model import Debounce
from palyra.tasks.worker import TaskContext

log = logging.getLogger("palyra.channels")

DISPATCH_TASK = "channel.dispatch"
COMMAND_TASK = "channel.command"
"""Built-in commands and pairing requests have their own workers, so a /cancel is answered
even while every dispatch worker waits on a long run."""
ACTOR = "system:channels"
DISPATCH_ATTEMPTS = 10
"""A dispatch cut short by a crash is claimed again at the next start; that counts as an
attempt, so the budget is generous (channel-busy retries have their own, smaller one)."""
MAX_CONTEXT_LINES = 20
RECENT_OUTCOMES = 4096


def _now() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class Admission:
    """What the platform (or RouteMessage caller) is told once the message is durable."""

    envelope_id: str
    accepted: bool
    reason: str
    action: str = ""
    task_id: str = ""
    duplicate: bool = False


@dataclass(slots=True)
class DispatchOutcome:
    """A finished dispatch, as RouteMessage answers it."""

    run_id: str = ""
    session_id: str = ""
    outputs: list[str] = field(default_factory=list)
    reason: str = ""
    delivered_to_active_run: bool = False
    queued_for_retry: bool = False


class ChannelBusy(Exception):
    """Every slot of the channel stayed busy; the task is retried later."""


class ChannelRouter:
    """Admission, dispatch and built-in commands over the journal, engine and task queue."""

    def __init__(self, store: JournalStore, engine: Engine, tasks: TaskQueue,
                 pairing: PairingBook, gate: PolicyGate, config: ChannelsConfig, *,
                 sinks: Sequence[str] = (), now_ms: Callable[[], int] = _now) -> None:
        self._store = store
        self._engine = engine
        self._tasks = tasks
        self.pairing = pairing
        self._gate = gate
        self.config = config
        self._sinks = set(sinks)
        self._now = now_ms
        self._agents = AgentRegistry(store)
        self._admitting = KeyedLocks()  # two deliveries of one event never admit twice
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._done: dict[str, asyncio.Future[DispatchOutcome]] = {}
        # Outcomes of the latest dispatches, for a RouteMessage caller that asks just
        # after the handler returned but before its task's success was committed.
        self._recent: OrderedDict[str, DispatchOutcome] = OrderedDict()

    # -- admission -----------------------------------------------------------
    async def admit(self, envelope: Envelope, *, dedupe: tuple[str, str, str] | None = None,
                    sink: str = "") -> Admission:
        """Keep one inbound message durably (or find it was kept already).

        ``dedupe`` is (provider, account, event id): a redelivery inside the
        dedupe window returns the first delivery's outcome and writes nothing.
        """
        env = msgspec.structs.replace(
            envelope, envelope_id=envelope.envelope_id or new_ulid(),
            received_ms=envelope.received_ms or self._now())
        key = records.dedupe_key(*dedupe) if dedupe else ""
        async with self._admitting.hold(key) if key else contextlib.nullcontext():
            if key:
                known = self._known(key)
                if known is not None:
                    return Admission(known.envelope_id, known.action not in ("reject", ""),
                                     known.reason, known.action, known.task_id,
                                     duplicate=True)
            return await self._admit_new(env, key, sink)

    def _known(self, key: str) -> DedupeRec | None:
        raw = self._store.get_entity(records.TABLE, key)
        if raw is None:
            return None
        rec = msgspec.msgpack.decode(raw, type=DedupeRec)
        return rec if rec.expires_ms > self._now() else None

    async def _admit_new(self, env: Envelope, key: str, sink: str) -> Admission:
        now = self._now()
        try:
            env = normalize(env)
        except Refused as refused:
            await self._quarantine(env, refused.reason, key)
            return Admission(env.envelope_id, False, refused.reason, "reject")
        if self.message(env.envelope_id) is not None:
            raise PalyraError(f"envelope {env.envelope_id} was already admitted (with another "
                              "adapter message id)", code=ErrorCode.ALREADY_EXISTS,
                              details={"envelope_id": env.envelope_id})
        policy = self.config.policy_for(env.channel)
        paired = env.is_direct_message and self.pairing.paired(env.channel, env.sender)
        decision = decide(env, policy, paired=paired)
        if decision.action == "pair" and not self.pairing.guesses.admit(env.channel, env.sender,
                                                                        now):
            # Over the guess budget: refused before anything is journaled.
            return Admission(env.envelope_id, False, "pairing_rate_limited", "reject")

        def drafts(task: TaskRecord | None) -> list[EventDraft]:
            task_id = task.task_id if task is not None else ""
            rec = InboundRec(envelope=env, decision=decision, admitted_ms=now, task_id=task_id,
                             sink=sink)
            writes = [records.msg_write(rec)]
            if key:
                writes.append(EntityWrite(records.TABLE, key, records.encode(DedupeRec(
                    envelope_id=env.envelope_id, task_id=task_id, action=decision.action,
                    reason=decision.reason, admitted_ms=now,
                    expires_ms=now + self.config.dedupe_window_s * 1000))))
            if decision.action == "context":
                writes.append(EntityWrite(records.TABLE,
                                          records.ctx_key(decision.session_key, env.envelope_id),
                                          b""))
            return [EventDraft(
                kind="channel.message_admitted", actor=f"channel:{env.channel}",
                principal=f"channel:{env.channel}",
                payload={"channel": env.channel, "envelope_id": env.envelope_id,
                         "conversation_id": env.conversation_id, "sender": env.sender,
                         "action": decision.action, "reason": decision.reason,
                         "task_id": task_id, "retry_attempt": env.retry_attempt},
                entity_writes=tuple(writes))]

        if decision.action in ("reject", "context"):
            await self._store.append(drafts(None))
            return Admission(env.envelope_id, decision.action == "context", decision.reason,
                             decision.action)
        debounce = None
        if decision.action == "respond" and policy.debounce_ms > 0 and not env.has_media:
            debounce = Debounce(coalesce_key(env), policy.debounce_ms, policy.max_wait_ms,
                                policy.batch_cap)
        kind = DISPATCH_TASK if decision.action == "respond" else COMMAND_TASK
        task, _created = await self._tasks.enqueue(
            kind, payload={"envelope_id": env.envelope_id},
            max_attempts=DISPATCH_ATTEMPTS, debounce=debounce, also=drafts)
        if policy.auto_ack and sink and decision.action == "respond":
            await self._queue_send(OutboundReply(
                sink=sink, key=f"ack:{env.envelope_id}", text=policy.auto_ack,
                conversation_id=env.conversation_id, thread_id=env.thread_id,
                reply_to=env.adapter_message_id))
        return Admission(env.envelope_id, True, decision.reason, decision.action, task.task_id)

    async def _quarantine(self, env: Envelope, reason: str, key: str) -> None:
        now = self._now()
        qid = new_ulid(now)
        writes = [EntityWrite(records.TABLE, records.QUARANTINE + qid, records.encode(
            QuarantineRec(quarantine_id=qid, reason=reason, envelope=env, at_ms=now)))]
        if key:
            writes.append(EntityWrite(records.TABLE, key, records.encode(DedupeRec(
                envelope_id=env.envelope_id, task_id="", action="reject", reason=reason,
                admitted_ms=now, expires_ms=now + self.config.dedupe_window_s * 1000))))
        await self._store.append([EventDraft(
            kind="channel.message_quarantined", actor=ACTOR,
            payload={"channel": env.channel, "envelope_id": env.envelope_id, "reason": reason,
                     "quarantine_id": qid},
            entity_writes=tuple(writes))])

    async def sweep(self) -> int:
        """Drop dedupe records past their window (keeps the table bounded); returns how many."""
        now, removed, after = self._now(), 0, ""
        while True:
            rows = self._store.scan_entities(records.TABLE, records.DEDUPE, after, 1000)
            expired = [k for k, v in rows
                       if msgspec.msgpack.decode(v, type=DedupeRec).expires_ms <= now]
            if expired:
                await self._store.append([EventDraft(
                    kind="channel.dedupe_swept", actor=ACTOR, payload={"count": len(expired)},
                    entity_writes=tuple(EntityWrite(records.TABLE, k, None) for k in expired))])
                removed += len(expired)
            if len(rows) < 1000:
                return removed
            after = rows[-1][0]

    async def sweep_every(self, interval_s: float = 3600.0) -> None:
        """Sweep now and then every ``interval_s`` (a daemon background task)."""
        while True:
            try:
                await self.sweep()
            except Exception:  # retried at the next interval; the window only grows longer
                log.exception("sweeping channel dedupe records failed")
            await asyncio.sleep(interval_s)

    def quarantined(self, channel: str = "", limit: int = 1000) -> list[QuarantineRec]:
        """The quarantine (of one channel, or all), oldest first, at most ``limit``."""
        out: list[QuarantineRec] = []
        after = ""
        while len(out) < limit:
            rows = self._store.scan_entities(records.TABLE, records.QUARANTINE, after, 1000)
            for _key, value in rows:
                rec = msgspec.msgpack.decode(value, type=QuarantineRec)
                if not channel or rec.envelope.channel == channel:
                    out.append(rec)
            if len(rows) < 1000:
                break
            after = rows[-1][0]
        return out[:limit]

    def message(self, envelope_id: str) -> InboundRec | None:
        """An admitted message, or None."""
        raw = self._store.get_entity(records.TABLE, records.MSG + envelope_id)
        return msgspec.msgpack.decode(raw, type=InboundRec) if raw is not None else None

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
    async def dispatch(self, ctx: TaskContext) -> dict[str, Any]:
        """Answer one coalesced batch of messages (a ``channel.dispatch`` task handler)."""
        items = ctx.payload.get("items") or [ctx.payload]
        msgs = [m for m in (self.message(i["envelope_id"]) for i in items) if m is not None]
        if not msgs:
            return {"reason": "no_messages"}
        first = msgs[0]
        try:
            if first.decision.action == "pair":
                outcome = await self._pair(first)
            elif first.decision.action == "command":
                outcome = await self._command(first)
            else:
                outcome = await self._respond(ctx.task, msgs)
        except ChannelBusy:
            policy = self.config.policy_for(first.envelope.channel)
            if ctx.task.attempts <= policy.max_retries:
                raise
            for m in msgs:  # out of retries: keep them where an operator can see them
                await self._quarantine(m.envelope, "channel_busy", "")
            outcome = DispatchOutcome(reason="quarantined_channel_busy")
        replies = outcome.outputs
        if first.sink and replies:
            for index, text in enumerate(replies):
                await self._queue_send(OutboundReply(
                    sink=first.sink, key=f"reply:{outcome.run_id or ctx.task.task_id}:{index}",
                    text=text, conversation_id=first.envelope.conversation_id,
                    thread_id=first.envelope.thread_id,
                    reply_to=first.envelope.adapter_message_id))
        result = msgspec.to_builtins(outcome)
        self._finished(ctx.task.task_id, outcome)
        return result  # type: ignore[no-any-return]

    async def _queue_send(self, reply: OutboundReply) -> None:
        await self._tasks.enqueue(SEND_TASK, payload=msgspec.to_builtins(reply),
                                  max_attempts=SEND_ATTEMPTS, idempotency_key=reply.key)

    def _identity(self, channel: str) -> IdentityRec:
        return IdentityRec(f"channel:{channel}", "", channel)

    @contextlib.asynccontextmanager
    async def _slot(self, channel: str) -> Any:
        policy = self.config.policy_for(channel)
        slots = self._slots.setdefault(channel, asyncio.Semaphore(policy.concurrency))
        try:
            async with asyncio.timeout(policy.slot_wait_s):
                await slots.acquire()
        except TimeoutError:
            raise ChannelBusy(channel) from None
        try:
            yield
        finally:
            slots.release()

    async def _respond(self, task: TaskRecord, msgs: list[InboundRec]) -> DispatchOutcome:
        env, decision = msgs[0].envelope, msgs[0].decision
        policy = self.config.policy_for(env.channel)
        identity = self._identity(env.channel)
        text = "\n\n".join(prompt_text(m.envelope, policy) for m in msgs)
        active = self._active_run(decision.session_key)
        # A dispatch claimed again after a crash finds its own run (its id is the task
        # id) still going: that run already has these messages, so it is only waited on.
        if active and active != task.task_id:
            with contextlib.suppress(PalyraError):  # it ended meanwhile: start a new run
                # The router starts its runs half-closed (they end once idle); a
                # message that arrives before that end still joins the run.
                await self._engine.send_input(identity, active, text, into_completing=True)
                return DispatchOutcome(run_id=active, reason="delivered_to_active_run",
                                       delivered_to_active_run=True)
        context, ctx_keys = self._context_lines(decision.session_key, env.envelope_id)
        if context:
            text = ("Earlier in this conversation (not addressed to you):\n"
                    + "\n".join(context) + "\n\n" + text)
        async with self._slot(env.channel):
            run_id = task.task_id  # a repeated dispatch finds its run
            try:
                agent_id = bound_agent(self._agents.bindings(), channel=env.channel,
                                       conversation_id=env.conversation_id,
                                       session_key=decision.session_key)
                agent = self._agents.get(agent_id) if agent_id else None
                await self._engine.start_run(identity, StartRun(
                    Selectors(session_key=decision.session_key), text=text, run_id=run_id,
                    driver="channel", complete=True, agent_id=agent.agent_id if agent else "",
                    agent_postures=postures_for(agent, self._engine.tool_names())
                    if agent else {}))
            except PalyraError as exc:
                if exc.code != ErrorCode.ALREADY_EXISTS:
                    raise
            record = await self._engine.wait_run(identity, run_id, until_terminal=True)
        if ctx_keys:
            await self._store.append([EventDraft(
                kind="channel.context_consumed", actor=ACTOR, run_id=run_id,
                payload={"count": len(ctx_keys)},
                entity_writes=tuple(EntityWrite(records.TABLE, k, None) for k in ctx_keys))])
        replies = self._replies(run_id)
        if not replies and record.state in (RunStateId.FAILED, RunStateId.CANCELLED):
            # Say so on the platform rather than leave the sender with silence.
            replies = [f"Sorry, I could not answer that (the run {record.state}"
                       f"{': ' + record.end_reason if record.end_reason else ''})."]
        outputs: list[str] = []
        for reply in replies:
            outputs += split_utf8(reply, policy.reply_max_bytes, policy.reply_prefix)
        return DispatchOutcome(run_id=run_id, session_id=record.session_id, outputs=outputs,
                               reason=f"run_{record.state}")

    def _active_run(self, session_key: str) -> str:
        session = self._engine.session_reader.by_key(session_key)
        if session is None or not session.last_run_id:
            return ""
        run_id = session.last_run_id
        return run_id if self._engine.phase_of(run_id) is not None else ""

    def _context_lines(self, session_key: str, before: str) -> tuple[list[str], list[str]]:
        prefix = records.ctx_key(session_key, "")
        rows = self._store.scan_entities(records.TABLE, prefix, "", 1000)
        keys = [k for k, _v in rows if k[len(prefix):] < before][-MAX_CONTEXT_LINES:]
        lines = []
        for k in keys:
            msg = self.message(k[len(prefix):])
            if msg is not None:
                lines.append(f"{msg.envelope.sender_display or msg.envelope.sender}: "
                             f"{msg.envelope.text}")
        return lines, keys

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

    # -- pairing and commands ------------------------------------------------
    async def _pair(self, msg: InboundRec) -> DispatchOutcome:
        env = msg.envelope
        policy = self.config.policy_for(env.channel)
        if self.pairing.paired(env.channel, env.sender):
            text = "You are already paired on this channel."
        else:
            approval = await self.pairing.request(env.channel, env.sender,
                                                  msg.decision.pairing_code)
            text = ("Pairing requested; an operator will approve or deny it "
                    f"(approval {approval.approval_id})." if approval is not None
                    else "That pairing code is unknown or expired.")
            if approval is None and self.pairing.guesses.wrong(env.channel, self._now()):
                await self.pairing.lock_codes(env.channel)
        return DispatchOutcome(outputs=split_utf8(text, policy.reply_max_bytes,
                                                  policy.reply_prefix), reason="pairing")

    async def _command(self, msg: InboundRec) -> DispatchOutcome:
        env, decision = msg.envelope, msg.decision
        policy = self.config.policy_for(env.channel)
        owner = (env.sender == self.pairing.owner(env.channel) or (
            env.sender in policy.allow_from and (env.sender_verified or not policy.strict_allow)))
        verdict = self._gate.check_channel_command(
            f"channel:{env.channel}", decision.command, channel=env.channel, sender=env.sender,
            admitted=True, owner=owner, verified=env.sender_verified)
        if not verdict.allowed:
            text = f"{decision.command} is not allowed for you here."
        else:
            text = await self._run_command(decision.command, env, decision)
        await self._store.append([EventDraft(
            kind="channel.command", actor=f"channel:{env.channel}",
            principal=f"channel:{env.channel}",
            payload={"channel": env.channel, "sender": env.sender, "command": decision.command,
                     "allowed": verdict.allowed, "reason": verdict.reason,
                     "policy_hash": verdict.policy_hash})])
        return DispatchOutcome(outputs=split_utf8(text, policy.reply_max_bytes,
                                                  policy.reply_prefix), reason="command")

    async def _run_command(self, command: str, env: Envelope, decision: Decision) -> str:
        identity = self._identity(env.channel)
        session = self._engine.session_reader.by_key(decision.session_key)
        if command == "/status":
            if session is None:
                return "No conversation yet."
            last = ""
            if session.last_run_id:
                run = self._engine.get_run(identity, session.last_run_id)
                last = f"; last run {run.run_id} is {run.state}"
            return f"Session {session.session_id}: {session.run_count} runs{last}."
        if command == "/cancel":
            run_id = self._active_run(decision.session_key)
            if not run_id:
                return "Nothing is running."
            cancelled, _rec = await self._engine.abort_run(identity, run_id, "channel /cancel")
            return f"Cancelled run {run_id}." if cancelled else f"Run {run_id} already ended."
        if session is not None:  # /reset
            await self._engine.session_writer.resolve(
                identity, Selectors(session_key=decision.session_key, reset=True))
        return "Started a new conversation."


def _outcome_of(task: TaskRecord) -> DispatchOutcome:
    if task.result_json:
        with contextlib.suppress(msgspec.ValidationError, msgspec.DecodeError):
            return msgspec.json.decode(task.result_json, type=DispatchOutcome)
    return DispatchOutcome(reason=f"dispatch_{task.state}")


__all__ = ["Admission", "ChannelRouter", "DispatchOutcome"]
