"""Admission: keep one inbound message durably, exactly once, before the platform is told.

Admission (:meth:`Admitter.admit`) is one journal commit holding the message,
its routing decision, its dedupe key and (for messages to answer) the
``channel.dispatch`` or ``channel.command`` task that will answer it. Only
after that commit is the platform acknowledged, so a crash before it loses
nothing the platform thinks was delivered (it redelivers), and a redelivery
after it finds the dedupe key and starts nothing (REFERENCE Part B 9; exactly
one effect per inbound event). Refused messages go to the quarantine instead.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

import msgspec

from palyra.channels import notices, records
from palyra.channels.config import ChannelsConfig
from palyra.channels.counters import ChannelCounters
from palyra.channels.outbox import OutboundReply, queue_send
from palyra.channels.pairing import PairingBook
from palyra.channels.recent import Recent
from palyra.channels.records import DedupeRec, InboundRec, QuarantineRec
from palyra.channels.routing import (
    Envelope,
    Refused,
    coalesce_key,
    decide,
    normalize,
    pairing_matters,
)
from palyra.channels.seen import SeenKeys
from palyra.core.errors import ErrorCode, PalyraError
from palyra.core.ids import new_ulid
from palyra.engine import KeyedLocks
from palyra.journal import EntityWrite, EventDraft, JournalStore
from palyra.tasks import TaskQueue, TaskRecord
from palyra.tasks.model import DEFAULT_LEASE_MS, Debounce
from palyra.tasks.worker import TaskWorker

log = logging.getLogger("palyra.channels")

DISPATCH_TASK = "channel.dispatch"
COMMAND_TASK = "channel.command"
"""Built-in commands and pairing requests have their own workers, so a /cancel is answered
even while every dispatch worker waits on a long run."""
ACTOR = "system:channels"
DISPATCH_ATTEMPTS = 10
"""A dispatch cut short by a crash is claimed again at the next start; that counts as an
attempt, so the budget is generous (channel-busy retries have their own, smaller one)."""
SCAN_PAGE = 1000


@dataclass(frozen=True, slots=True)
class Admission:
    """What the platform (or RouteMessage caller) is told once the message is durable."""

    envelope_id: str
    accepted: bool
    reason: str
    action: str = ""
    task_id: str = ""
    duplicate: bool = False


def dedupe_keys(env: Envelope, delivery: tuple[str, str, str] | None) -> tuple[str, ...]:
    """The dedupe rows of one delivery: its delivery id's and its platform message id's
    (within the channel and conversation), sorted, either absent when unknown."""
    keys = {records.dedupe_key(*delivery)} if delivery else set()
    if env.adapter_message_id.strip():
        keys.add(records.message_key(env.channel.strip(), env.conversation_id.strip(),
                                     env.adapter_message_id.strip()))
    return tuple(sorted(keys))


class Admitter:
    """Admission, the dedupe records and the quarantine, over the journal and task queue."""

    def __init__(self, store: JournalStore, tasks: TaskQueue, pairing: PairingBook,
                 config: ChannelsConfig, now_ms: Callable[[], int],
                 recent: Recent | None = None, *, shared: bool = False) -> None:
        self._store = store
        self.recent = recent or Recent()
        self._tasks = tasks
        self._pairing = pairing
        self._config = config
        self._now = now_ms
        self._admitting = KeyedLocks()  # two deliveries of one event never admit twice
        self.counters = ChannelCounters()  # duplicates: answered without a commit
        # The worker that answers messages: a message's dispatch task is born claimed by
        # it in the admission's commit and handed to it at once (no claim commit).
        self.dispatcher: TaskWorker | None = None
        # Dedupe keys that may be in the table: a new delivery's keys are not read. Not
        # on a journal other daemons share (``shared``): a delivery admitted by another
        # daemon reaches this one's filter only once its watcher sees the commit, while
        # a read of the row sees it as soon as it is committed.
        self._in_flight: set[str] = set()  # keys of admissions not yet committed
        # Until its first build (the first sweep's, moments after start) there is no
        # filter and every key is read: building it reads the whole table, which is
        # done in pages between which the loop serves (:meth:`rebuild_seen`).
        self._shared = shared
        self._seen: SeenKeys | None = None
        self._told: set[str] | None = None  # keys told meanwhile, while a build runs
        self._building = asyncio.Lock()

    async def admit(self, envelope: Envelope, *, dedupe: tuple[str, str, str] | None = None,
                    sink: str = "", also: Sequence[EntityWrite] = (), hint: bool = True
                    ) -> Admission:
        """Keep one inbound message durably (or find it was kept already).

        Two keys find a message already kept: the delivery's, ``dedupe`` =
        (provider, account, delivery id), and the message's own, (channel,
        conversation, ``adapter_message_id``), for a sender that delivers the
        same message again under a new delivery id. Either one found inside the
        dedupe window returns the first delivery's outcome and writes nothing.
        ``also`` lands in the admission's commit (a long-polling adapter's offset).
        ``hint`` False: the adapter tells an unpaired sender how to pair itself.
        """
        minted = not envelope.envelope_id
        env = msgspec.structs.replace(
            envelope, envelope_id=envelope.envelope_id or new_ulid(),
            received_ms=envelope.received_ms or self._now())
        keys = dedupe_keys(env, dedupe)
        # Sorted: two admissions never wait on each other in a cycle.
        async with self._admitting.hold_all(keys):
            for key in keys:
                known = self._known(key)
                if known is not None:
                    self.counters.duplicate(env.channel)
                    return Admission(known.envelope_id, known.action not in ("reject", ""),
                                     known.reason, known.action, known.task_id,
                                     duplicate=True)
            # Told before the commit (an early "maybe" only costs a read), and kept as
            # in flight until it lands, so a rebuild of the filter meanwhile keeps them.
            self._in_flight.update(keys)
            if self._told is not None:
                self._told.update(keys)
            if self._seen is not None:
                for key in keys:
                    self._seen.add(key)
            try:
                return await self._admit_new(env, keys, sink, tuple(also), minted=minted,
                                             hint=hint)
            finally:
                self._in_flight.difference_update(keys)

    async def rebuild_seen(self) -> None:
        """Build the filter afresh from the dedupe rows in the table now (not on a shared
        journal), a page at a time with the loop served between pages.

        A key told to the filter while the build runs may be committed behind the scan's
        position, so every key in flight when the build starts, and every key told until
        the new filter replaces the old, is added to the new one before the swap.
        """
        if self._shared:
            return
        async with self._building:
            self._told = set(self._in_flight)
            try:
                count = 0
                async for page in self._dedupe_pages():
                    count += len(page)
                # A partial, not a lambda: asked on every new delivery's dedupe check.
                seen = SeenKeys(count,
                                foreign=functools.partial(self._store.foreign_writes,
                                                          records.TABLE))
                async for page in self._dedupe_pages():
                    for key in page:
                        seen.add(key)
                for key in self._told:  # no await from here to the swap
                    seen.add(key)
                self._seen = seen
            finally:
                self._told = None

    async def _dedupe_pages(self) -> AsyncIterator[list[str]]:
        """The dedupe table's keys, a page per read, yielding to the loop between pages."""
        after = ""
        while True:
            rows = self._store.scan_entities(records.TABLE, records.DEDUPE, after, SCAN_PAGE)
            yield [key for key, _value in rows]
            if len(rows) < SCAN_PAGE:
                return
            after = rows[-1][0]
            await asyncio.sleep(0)

    def _known(self, key: str) -> DedupeRec | None:
        if self._seen is not None and self._seen.absent(key):
            return None
        raw = self._store.get_entity(records.TABLE, key)
        if raw is None:
            return None
        rec = msgspec.msgpack.decode(raw, type=DedupeRec)
        return rec if rec.expires_ms > self._now() else None

    async def _admit_new(self, env: Envelope, keys: tuple[str, ...], sink: str,
                         also: tuple[EntityWrite, ...], *, minted: bool, hint: bool
                         ) -> Admission:
        now = self._now()
        try:
            env = normalize(env)
        except Refused as refused:
            await self.quarantine(env, refused.reason, keys, also)
            return Admission(env.envelope_id, False, refused.reason, "reject")
        # An id minted here is new; only a caller's own (RouteMessage) may be taken.
        if not minted and self.message(env.envelope_id) is not None:
            raise PalyraError(f"envelope {env.envelope_id} was already admitted (with another "
                              "adapter message id)", code=ErrorCode.ALREADY_EXISTS,
                              details={"envelope_id": env.envelope_id})
        policy = self._config.policy_for(env.channel)
        paired = pairing_matters(env, policy) and self._pairing.paired(env.channel, env.sender)
        decision = decide(env, policy, paired=paired)
        if decision.action == "pair" and not self._pairing.guesses.admit(env.channel, env.sender,
                                                                         now):
            # Over the guess budget: refused before anything is journaled.
            return Admission(env.envelope_id, False, "pairing_rate_limited", "reject")

        kept: list[InboundRec] = []  # the message as its commit holds it

        def drafts(task: TaskRecord | None) -> list[EventDraft]:
            task_id = task.task_id if task is not None else ""
            rec = InboundRec(envelope=env, decision=decision, admitted_ms=now, task_id=task_id,
                             sink=sink)
            kept[:] = [rec]
            writes = [records.msg_write(rec)]
            seen = records.encode(DedupeRec(
                envelope_id=env.envelope_id, task_id=task_id, action=decision.action,
                reason=decision.reason, admitted_ms=now,
                expires_ms=now + self._config.dedupe_window_s * 1000))
            writes += [EntityWrite(records.TABLE, key, seen) for key in keys]
            writes += also
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
            if decision.reason == "pairing_required" and sink and hint:
                await self._refuse_with_hint(env, sink, policy.pairing_hint_interval_s, now,
                                             drafts(None))
            else:
                await self._store.append(drafts(None))
            if decision.action == "context":
                self.recent.context_kept(decision.session_key)
            return Admission(env.envelope_id, decision.action == "context", decision.reason,
                             decision.action)
        debounce = None
        if decision.action == "respond" and policy.debounce_ms > 0 and not env.has_media:
            debounce = Debounce(coalesce_key(env), policy.debounce_ms, policy.max_wait_ms,
                                policy.batch_cap)
        kind = DISPATCH_TASK if decision.action == "respond" else COMMAND_TASK
        # Born claimed when the dispatch worker can take it now; a coalesced message
        # waits for its batch, and a busy worker's tasks queue for its loops.
        taker = self.dispatcher if kind == DISPATCH_TASK and debounce is None else None
        if taker is not None and not taker.can_adopt():
            taker = None
        task, _created = await self._tasks.enqueue(
            kind, payload={"envelope_id": env.envelope_id},
            max_attempts=DISPATCH_ATTEMPTS, debounce=debounce, also=drafts,
            claim_for=taker.owner if taker is not None else "",
            lease_ms=taker.lease_ms if taker is not None else DEFAULT_LEASE_MS)
        self.recent.admitted(kept[0])
        if taker is not None and task.leased:
            taker.adopt(task)
        if policy.auto_ack and sink and decision.action == "respond":
            await queue_send(self._tasks, OutboundReply(
                sink=sink, key=f"ack:{env.envelope_id}", text=policy.auto_ack,
                conversation_id=env.conversation_id, thread_id=env.thread_id,
                reply_to=env.adapter_message_id, reply_token=env.reply_token))
        return Admission(env.envelope_id, True, decision.reason, decision.action, task.task_id)

    async def _refuse_with_hint(self, env: Envelope, sink: str, interval_s: int, now: int,
                                drafts: list[EventDraft]) -> None:
        """Refuse an unpaired DM and, unless this sender was told lately, tell them how to
        pair: the refusal, the reply and the rate limit's row are one commit."""
        key = records.hint_key(env.channel, env.sender)
        async with self._admitting.hold(key):  # one sender's DMs in a burst: one hint
            raw = self._store.get_entity(records.TABLE, key)
            if not notices.hint_due(int(raw) if raw else None, now, interval_s):
                await self._store.append(drafts)
                return
            stamp = EventDraft(kind="channel.pairing_hinted", actor=ACTOR,
                               payload={"channel": env.channel, "sender": env.sender},
                               entity_writes=(EntityWrite(records.TABLE, key, str(now).encode()),))
            await queue_send(self._tasks, OutboundReply(
                sink=sink, key=f"hint:{env.envelope_id}", text=notices.PAIRING_HINT,
                conversation_id=env.conversation_id, thread_id=env.thread_id,
                reply_to=env.adapter_message_id, reply_token=env.reply_token),
                also=[*drafts, stamp])

    async def quarantine(self, env: Envelope, reason: str, keys: tuple[str, ...] = (),
                         also: tuple[EntityWrite, ...] = ()) -> None:
        """Keep ``env`` where an operator can see it (and its dedupe keys, when given)."""
        now = self._now()
        qid = new_ulid(now)
        writes = [EntityWrite(records.TABLE, records.QUARANTINE + qid, records.encode(
            QuarantineRec(quarantine_id=qid, reason=reason, envelope=env, at_ms=now)))]
        seen = records.encode(DedupeRec(
            envelope_id=env.envelope_id, task_id="", action="reject", reason=reason,
            admitted_ms=now, expires_ms=now + self._config.dedupe_window_s * 1000))
        writes += [EntityWrite(records.TABLE, key, seen) for key in keys]
        writes += also
        await self._store.append([EventDraft(
            kind="channel.message_quarantined", actor=ACTOR,
            payload={"channel": env.channel, "envelope_id": env.envelope_id, "reason": reason,
                     "quarantine_id": qid},
            entity_writes=tuple(writes))])

    async def sweep(self) -> int:
        """Drop dedupe records past their window (keeps the table bounded); returns how many."""
        now, removed, after = self._now(), 0, ""
        while True:
            rows = self._store.scan_entities(records.TABLE, records.DEDUPE, after, SCAN_PAGE)
            expired = [k for k, v in rows
                       if msgspec.msgpack.decode(v, type=DedupeRec).expires_ms <= now]
            if expired:
                await self._store.append([EventDraft(
                    kind="channel.dedupe_swept", actor=ACTOR, payload={"count": len(expired)},
                    entity_writes=tuple(EntityWrite(records.TABLE, k, None) for k in expired))])
                removed += len(expired)
            if len(rows) < SCAN_PAGE:
                # A filter cannot forget a key: rebuilt from the rows left (and built
                # for the first time by the sweep at start).
                await self.rebuild_seen()
                return removed
            after = rows[-1][0]
            await asyncio.sleep(0)  # a large table's pages: the loop serves between them

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
            rows = self._store.scan_entities(records.TABLE, records.QUARANTINE, after, SCAN_PAGE)
            for _key, value in rows:
                rec = msgspec.msgpack.decode(value, type=QuarantineRec)
                if not channel or rec.envelope.channel == channel:
                    out.append(rec)
            if len(rows) < SCAN_PAGE:
                break
            after = rows[-1][0]
        return out[:limit]

    def message(self, envelope_id: str) -> InboundRec | None:
        """An admitted message, or None."""
        held = self.recent.message(envelope_id)
        if held is not None:
            return held
        raw = self._store.get_entity(records.TABLE, records.MSG + envelope_id)
        return msgspec.msgpack.decode(raw, type=InboundRec) if raw is not None else None
