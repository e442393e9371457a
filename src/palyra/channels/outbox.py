"""The outbox: every reply is journaled (a ``channel.send`` task) before it is sent.

A send task carries one reply's chunks in order, each with its idempotency key.
The worker sends them one after another through the channel's :class:`Sink`, so
a long reply reads in order on the platform, and after each chunk but the last
records on the task how many went out (a heartbeat's progress): an attempt
after a failure or a restart resumes at the first chunk not known delivered,
never sending one twice. Retries use the task queue's durable backoff, so they
survive a restart. A send whose result is unknown (a timeout, a connection
dropped after the request went out) is never blindly repeated: the next
attempt first asks the sink whether that chunk's key was delivered
(:meth:`Sink.delivered`) and only sends if it was not.

The sends of one conversation take turns (:class:`Lanes`): a reply is sent whole
before the next reply to that conversation starts, in the order their tasks
reached the outbox (the order the runs ended). Outbound rate limits are kept per
sink.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import msgspec
import structlog

from palyra.engine import KeyedLocks
from palyra.journal import EventDraft
from palyra.tasks import TaskQueue
from palyra.tasks.model import DEFAULT_LEASE_MS, TaskRecord
from palyra.tasks.queue import MAX_PAYLOAD
from palyra.tasks.worker import TaskContext

log = structlog.get_logger("palyra.channels")

SEND_TASK = "channel.send"
SEND_ATTEMPTS = 8
SEND_CONCURRENCY = 16
"""Sends in flight at once, as many as dispatches (16). With 4, a burst of replies
outgrew what the worker takes in the commit of its dispatch's success (a few times its
concurrency): the rest queued for claim commits of their own, one commit each, and
replies trailed admissions by seconds (``bench ingress``: the drain after 1,000
messages 6 s, now 2). The per-sink rate limit still spaces the sends."""


class OutboundReply(msgspec.Struct, frozen=True, kw_only=True):
    """One reply chunk for a sink."""

    sink: str
    key: str
    text: str
    conversation_id: str = ""
    thread_id: str = ""
    reply_to: str = ""
    reply_token: str = ""  # Envelope.reply_token of the message answered


class Chunk(msgspec.Struct, frozen=True, array_like=True):
    """One chunk of a send task: its idempotency key and text."""

    key: str
    text: str


class SendPayload(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A ``channel.send`` task's payload: chunks to one conversation, sent in order.

    A task queued before chunks were carried together holds one chunk as ``key`` and
    ``text`` (and no ``chunks``); it is read as a one-chunk send.
    """

    sink: str
    chunks: tuple[Chunk, ...] = ()
    key: str = ""
    text: str = ""
    conversation_id: str = ""
    thread_id: str = ""
    reply_to: str = ""
    reply_token: str = ""

    def replies(self) -> list[OutboundReply]:
        """The chunks as the sink sends them, in order."""
        chunks = self.chunks or (Chunk(self.key, self.text),)
        return [OutboundReply(sink=self.sink, key=c.key, text=c.text,
                              conversation_id=self.conversation_id, thread_id=self.thread_id,
                              reply_to=self.reply_to, reply_token=self.reply_token)
                for c in chunks]


PAYLOAD_ROOM = MAX_PAYLOAD - 4096
"""What one send task's chunks may take (JSON), under the queue's payload limit with
room for the addressing fields."""


def send_payloads(replies: Sequence[OutboundReply]) -> list[dict[str, Any]]:
    """``replies`` (chunks of one conversation, in order) as send task payloads: one,
    unless they outgrow a task's payload, then consecutive groups (queued together, so
    the outbox's lanes still send them in order)."""
    if not replies:
        return []
    first = replies[0]
    groups: list[list[Chunk]] = [[]]
    size = 0
    for reply in replies:
        chunk = Chunk(reply.key, reply.text)
        weight = len(msgspec.json.encode(chunk))
        if groups[-1] and size + weight > PAYLOAD_ROOM:
            groups.append([])
            size = 0
        groups[-1].append(chunk)
        size += weight
    return [msgspec.to_builtins(SendPayload(
        sink=first.sink, chunks=tuple(group), conversation_id=first.conversation_id,
        thread_id=first.thread_id, reply_to=first.reply_to, reply_token=first.reply_token))
        for group in groups]


async def queue_send(tasks: TaskQueue, reply: OutboundReply | Sequence[OutboundReply],
                     also: Sequence[EventDraft] = ()) -> None:
    """Journal ``reply`` (one chunk, or the chunks of one reply in order) as
    ``channel.send`` tasks, once per first chunk's idempotency key, with ``also`` in the
    commit of the first (nothing of it is written when the key was known)."""
    chunks = [reply] if isinstance(reply, OutboundReply) else list(reply)
    for index, payload in enumerate(send_payloads(chunks)):
        await tasks.enqueue(SEND_TASK, payload=payload, max_attempts=SEND_ATTEMPTS,
                            idempotency_key=payload["chunks"][0][0],
                            also=_drafts(also) if also and index == 0 else None)


def _drafts(also: Sequence[EventDraft]) -> Callable[[TaskRecord], Sequence[EventDraft]]:
    return lambda _task: also


class DeliveryUnknown(Exception):
    """The request may have reached the platform; reconcile before sending again."""


class Sink(Protocol):
    """Where a channel's replies go (a Slack workspace, a webhook URL)."""

    name: str
    rate_per_s: float

    async def send(self, reply: OutboundReply) -> None:
        """Deliver; raise :class:`DeliveryUnknown` when the outcome is unknown."""

    async def delivered(self, reply: OutboundReply) -> bool:
        """Whether a reply with this key already reached the platform."""


class RateLimiter:
    """At most ``rate`` starts per second (evenly spaced), per limiter.

    Each caller reserves the next free start as it arrives (read and moved with no await
    between, so the reservations are in arrival order) and sleeps until it: no lock held
    across the sleep, whose acquire and release cost every reply five Python calls. A
    caller cancelled in its sleep leaves its start unused: never more than the rate.
    """

    def __init__(self, rate: float) -> None:
        self._interval = 1.0 / rate if rate > 0 else 0.0
        self._next = 0.0

    def reserve(self) -> float:
        """Take the next free start; the seconds until it (0: now)."""
        now = time.monotonic()
        start = self._next if self._next > now else now
        self._next = start + self._interval
        return start - now


class Lanes:
    """Turns per conversation: one holder at a time, in arrival order (asyncio's locks
    are fair); a lane exists only while someone holds it or waits for it. A lane is a
    name of the engine's :class:`KeyedLocks`, which keeps exactly that bookkeeping."""

    def __init__(self) -> None:
        self._locks = KeyedLocks()

    def turn(self, sink: str, conversation_id: str) -> AbstractAsyncContextManager[None]:
        """Hold the conversation's lane (an empty conversation id is a lane too)."""
        # The sink's length first: no two (sink, conversation) pairs share a name.
        return self._locks.hold(f"{len(sink)}:{sink}{conversation_id}")

    def __len__(self) -> int:
        return len(self._locks)


class Outbox:
    """Runs ``channel.send`` tasks against the configured sinks.

    ``tasks`` records each task's progress between its chunks (without it, as in tests
    of one chunk, nothing is recorded); ``lease_ms`` is the lease its worker claims with.
    """

    def __init__(self, sinks: dict[str, Sink], tasks: TaskQueue | None = None, *,
                 lease_ms: int = DEFAULT_LEASE_MS) -> None:
        self.sinks = sinks
        self._limits = {name: RateLimiter(s.rate_per_s) for name, s in sinks.items()}
        self._tasks = tasks
        self.lease_ms = lease_ms
        self.lanes = Lanes()
        self.sent = 0
        self.reconciled = 0

    async def handle(self, ctx: TaskContext) -> dict[str, Any]:
        """One send attempt (a task handler): the task's chunks not yet delivered, in order."""
        send = msgspec.convert(ctx.payload, SendPayload)
        replies = send.replies()
        sink = self.sinks.get(send.sink)
        if sink is None:  # the config lost this sink: fail, the task keeps the reply
            raise LookupError(f"no channel sink {send.sink!r} is configured")
        task = ctx.task
        done = _progress(task.progress_json)
        reconciled = 0
        async with self.lanes.turn(send.sink, send.conversation_id):
            for index in range(done, len(replies)):
                reply = replies[index]
                try:
                    # Only the first chunk not known sent can have an unknown outcome:
                    # the chunks after it were never tried (they go out one by one).
                    if task.attempts > 1 and index == done and await sink.delivered(reply):
                        self.reconciled += 1
                        reconciled += 1
                    else:
                        delay = self._limits[send.sink].reserve()
                        if delay > 0:
                            await asyncio.sleep(delay)
                        await sink.send(reply)
                        self.sent += 1
                except Exception as exc:
                    # The task keeps the reply and retries it; the log says where it is stuck.
                    last = task.attempts >= task.max_attempts
                    log.warning("channel reply not delivered" + ("; giving up" if last else ""),
                                channel=send.sink, conversation_id=send.conversation_id,
                                thread_id=send.thread_id, key=reply.key, task_id=task.task_id,
                                attempt=task.attempts, max_attempts=task.max_attempts,
                                chunk=index, chunks=len(replies),
                                error=f"{type(exc).__name__}: {exc}")
                    raise
                if index + 1 < len(replies) and self._tasks is not None:
                    # Durable before the next chunk goes out: a retry starts after it.
                    await self._tasks.heartbeat(task.task_id, task.lease_epoch, self.lease_ms,
                                                progress={"sent": index + 1})
        result: dict[str, Any] = {"delivered": True, "chunks": len(replies)}
        if reconciled:
            result["reconciled"] = True
        return result


def _progress(progress_json: str) -> int:
    """How many chunks an earlier attempt recorded as delivered."""
    if not progress_json:
        return 0
    sent = msgspec.json.decode(progress_json).get("sent", 0)
    return sent if isinstance(sent, int) and sent >= 0 else 0
