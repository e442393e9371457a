"""The outbox: every reply is journaled (a ``channel.send`` task) before it is sent.

A send task carries the reply and its idempotency key. The worker sends it
through the channel's :class:`Sink`, retrying with the task queue's durable
backoff, so retries survive a restart. A send whose result is unknown (a
timeout, a connection dropped after the request went out) is never blindly
repeated: the next attempt first asks the sink whether the key was delivered
(:meth:`Sink.delivered`) and only sends if it was not. Outbound rate limits
are kept per sink.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Protocol

import msgspec
import structlog

from palyra.journal import EventDraft
from palyra.tasks import TaskQueue
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


async def queue_send(tasks: TaskQueue, reply: OutboundReply,
                     also: Sequence[EventDraft] = ()) -> None:
    """Journal ``reply`` as a ``channel.send`` task (once per idempotency key), with
    ``also`` in the same commit (nothing of it is written when the key was known)."""
    await tasks.enqueue(SEND_TASK, payload=msgspec.to_builtins(reply),
                        max_attempts=SEND_ATTEMPTS, idempotency_key=reply.key,
                        also=(lambda _task: also) if also else None)


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
    """At most ``rate`` starts per second (evenly spaced), per limiter."""

    def __init__(self, rate: float) -> None:
        self._interval = 1.0 / rate if rate > 0 else 0.0
        self._next = 0.0
        self._lock = asyncio.Lock()

    async def wait(self) -> None:
        async with self._lock:
            now = time.monotonic()
            if self._next > now:
                await asyncio.sleep(self._next - now)
                now = self._next
            self._next = now + self._interval


class Outbox:
    """Runs ``channel.send`` tasks against the configured sinks."""

    def __init__(self, sinks: dict[str, Sink]) -> None:
        self.sinks = sinks
        self._limits = {name: RateLimiter(s.rate_per_s) for name, s in sinks.items()}
        self.sent = 0
        self.reconciled = 0

    async def handle(self, ctx: TaskContext) -> dict[str, Any]:
        """One send attempt (a task handler)."""
        reply = msgspec.convert(ctx.payload, OutboundReply)
        sink = self.sinks.get(reply.sink)
        if sink is None:  # the config lost this sink: fail, the task keeps the reply
            raise LookupError(f"no channel sink {reply.sink!r} is configured")
        try:
            if ctx.task.attempts > 1 and await sink.delivered(reply):
                self.reconciled += 1
                return {"delivered": True, "reconciled": True}
            await self._limits[reply.sink].wait()
            await sink.send(reply)
        except Exception as exc:
            # The task keeps the reply and retries it; the log says where it is stuck.
            last = ctx.task.attempts >= ctx.task.max_attempts
            log.warning("channel reply not delivered" + ("; giving up" if last else ""),
                        channel=reply.sink, conversation_id=reply.conversation_id,
                        thread_id=reply.thread_id, key=reply.key, task_id=ctx.task.task_id,
                        attempt=ctx.task.attempts, max_attempts=ctx.task.max_attempts,
                        error=f"{type(exc).__name__}: {exc}")
            raise
        self.sent += 1
        return {"delivered": True}
