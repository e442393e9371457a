"""Discord: Gateway ``MESSAGE_CREATE`` events as envelopes, REST replies with rate limits.

A message is keyed by its snowflake id (delivery and message key alike: the
Gateway has no delivery id). A message without ``guild_id`` is a DM; in a guild the
bot is addressed by a mention of its user id (``<@id>``, cut from the text) or a
reply to one of its messages. Messages from bots and webhooks are ignored.

Replies go to ``POST /channels/{channel_id}/messages`` as replies to the message,
with a ``nonce`` derived from the idempotency key and ``enforce_nonce``: Discord
returns the message already created under that nonce (within minutes) instead of
creating a second one, so a retry after an unknown outcome does not double-post.
Rate limits are honoured per bucket (``X-RateLimit-Remaining`` /
``X-RateLimit-Reset-After``) and on ``429`` (``retry_after``). The reply to a slash
command (:mod:`~palyra.channels.adapters.discord_interactions`) goes through its
interaction's webhook instead, which takes no nonce: after an unknown outcome it is
sent again (at least once, as on Telegram).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import msgspec

from palyra.channels.adapters._http_client import platform_client
from palyra.channels.outbox import DeliveryUnknown, OutboundReply
from palyra.channels.routing import Envelope
from palyra.engine import KeyedLocks

MAX_CHARS = 2000
"""Discord's limit on one message's content."""
GUILD_MESSAGES, DIRECT_MESSAGES, MESSAGE_CONTENT = 1 << 9, 1 << 12, 1 << 15
INTENTS = GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT
MAX_429_WAITS = 3
MAX_ROUTES = 1024
"""Routes whose bucket id :class:`RateBuckets` remembers (a route names a channel or an
interaction's token, so there is one per conversation and per slash command: bounded)."""


class Author(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    username: str = ""
    global_name: str | None = None
    bot: bool = False


class Reference(msgspec.Struct, frozen=True, kw_only=True):
    """The message a message replies to (only what palyra reads of it)."""

    id: str
    author: Author | None = None
    content: str = ""


class MessageCreate(msgspec.Struct, frozen=True, kw_only=True):
    """``d`` of a ``MESSAGE_CREATE`` dispatch."""

    id: str
    channel_id: str
    author: Author
    content: str = ""
    guild_id: str = ""
    webhook_id: str = ""
    mentions: list[Author] = []
    mention_everyone: bool = False
    attachments: list[Any] = []
    referenced_message: Reference | None = None


def nonce(key: str) -> str:
    """A reply's nonce (Discord takes at most 25 characters): fixed per idempotency key."""
    return hashlib.sha256(key.encode()).hexdigest()[:25]


def envelope(channel: str, msg: MessageCreate, *, me: str) -> Envelope | None:
    """The envelope of a ``MESSAGE_CREATE``; None for bots', webhooks' and the bot's own."""
    if msg.author.bot or msg.webhook_id or msg.author.id == me:
        return None
    is_dm = not msg.guild_id
    mention = re.compile(rf"<@!?{re.escape(me)}>") if me else None
    mentioned = bool(me) and any(m.id == me for m in msg.mentions)
    replied = (msg.referenced_message is not None and msg.referenced_message.author is not None
               and msg.referenced_message.author.id == me)
    text = " ".join(mention.sub("", msg.content).split()) if mention and mentioned \
        else msg.content
    quoted = msg.referenced_message
    quoted_other = quoted is not None and quoted.author is not None and quoted.author.id != me
    return Envelope(
        envelope_id="", channel=channel, conversation_id=msg.channel_id,
        sender=msg.author.id, sender_display=msg.author.global_name or msg.author.username,
        sender_verified=True, text=text, is_direct_message=is_dm,
        is_broadcast=msg.mention_everyone, adapter_message_id=msg.id,
        mentions_agent=(mentioned or replied) and not is_dm,
        quoted_text=quoted.content if quoted is not None and quoted_other else "",
        quoted_sender=quoted.author.id if quoted is not None and quoted.author is not None
        and quoted_other else "",
        has_media=bool(msg.attachments))


class RateBuckets:
    """Discord's per-route rate limits: wait when a bucket is spent, until it resets.

    Memory stays bounded however many routes the replies name: a route's lock lives
    only while a send holds or awaits it, a reset time only until it passes (those
    passed are swept once more than :data:`MAX_ROUTES` are kept), and the route ->
    bucket map keeps the :data:`MAX_ROUTES` most recently told (a route it forgot is
    its own bucket until Discord's next answer names the shared one again).
    """

    def __init__(self) -> None:
        self._bucket_of: dict[str, str] = {}  # route -> bucket id, as Discord names it
        self._resume_at: dict[str, float] = {}  # bucket (or route) -> monotonic time
        self._locks = KeyedLocks()

    def _key(self, route: str) -> str:
        return self._bucket_of.get(route, route)

    @contextlib.asynccontextmanager
    async def held(self, route: str) -> AsyncIterator[None]:
        """One send at a time on ``route``."""
        async with self._locks.hold(route):
            yield

    async def wait(self, route: str) -> None:
        key = self._key(route)
        delay = self._resume_at.get(key, 0.0) - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            self._resume_at.pop(key, None)

    def update(self, route: str, headers: httpx.Headers) -> None:
        bucket = headers.get("x-ratelimit-bucket")
        if bucket:
            self._bucket_of.pop(route, None)  # most recent last
            self._bucket_of[route] = bucket
            if len(self._bucket_of) > MAX_ROUTES:
                del self._bucket_of[next(iter(self._bucket_of))]
        remaining, reset_after = (headers.get("x-ratelimit-remaining"),
                                  headers.get("x-ratelimit-reset-after"))
        if remaining is not None and reset_after is not None and int(remaining) <= 0:
            self._resume(route, float(reset_after))

    def limited(self, route: str, retry_after: float) -> None:
        self._resume(route, retry_after)

    def _resume(self, route: str, after_s: float) -> None:
        now = time.monotonic()
        self._resume_at[self._key(route)] = now + after_s
        if len(self._resume_at) > MAX_ROUTES:
            for key in [k for k, at in self._resume_at.items() if at <= now]:
                del self._resume_at[key]

    def sizes(self) -> tuple[int, int, int]:
        """Routes held in memory: (bucket ids, reset times, locks)."""
        return len(self._bucket_of), len(self._resume_at), len(self._locks)


class DiscordSink:
    """Replies through the REST API (``Authorization: Bot <token>``)."""

    max_chars = MAX_CHARS

    def __init__(self, name: str, api_base_url: str, bot_token: str, *,
                 rate_per_s: float = 0.0, client: httpx.AsyncClient | None = None,
                 timeout_s: float = 10.0) -> None:
        self.name = name
        self.rate_per_s = rate_per_s  # 0: Discord's own buckets are the limit
        self._base = api_base_url.rstrip("/")
        self._headers = {"authorization": f"Bot {bot_token}"} if bot_token else {}
        self._client = client or platform_client(timeout_s)
        self.buckets = RateBuckets()

    async def send(self, reply: OutboundReply) -> None:
        if reply.reply_token:
            # A slash command's reply: through the interaction's webhook (its first
            # follow-up takes the place of "thinking..."). Webhooks take no nonce.
            route = f"POST /webhooks/{reply.reply_token}"
            # What errors name: the token in the path is a credential, kept out of logs.
            shown = f"POST /webhooks/{reply.reply_token.partition('/')[0]}/<token>"
            url = f"{self._base}/webhooks/{reply.reply_token}"
            headers: dict[str, str] = {}
            body: dict[str, Any] = {"content": reply.text, "allowed_mentions": {"parse": []}}
        else:
            route = shown = f"POST /channels/{reply.conversation_id}/messages"
            url = f"{self._base}/channels/{reply.conversation_id}/messages"
            headers = self._headers
            body = {"content": reply.text, "nonce": nonce(reply.key), "enforce_nonce": True,
                    "allowed_mentions": {"parse": []}}
            if reply.reply_to:
                body["message_reference"] = {"message_id": reply.reply_to,
                                             "fail_if_not_exists": False}
        async with self.buckets.held(route):
            for _ in range(MAX_429_WAITS + 1):
                await self.buckets.wait(route)
                try:
                    answer = await self._client.post(url, json=body, headers=headers)
                except (httpx.ReadTimeout, httpx.WriteTimeout,
                        httpx.RemoteProtocolError) as exc:
                    raise DeliveryUnknown(str(exc)) from exc
                self.buckets.update(route, answer.headers)
                if answer.status_code != 429:
                    if answer.is_error:
                        raise RuntimeError(f"Discord answered {answer.status_code} on {shown}")
                    return
                self.buckets.limited(route, float(answer.json().get("retry_after", 1.0)))
        raise RuntimeError(f"Discord kept answering 429 on {shown}")

    async def delivered(self, reply: OutboundReply) -> bool:
        # The nonce makes a resend return the message already created: send again.
        return False

    async def aclose(self) -> None:
        await self._client.aclose()
