"""Telegram Bot API: webhook verification, updates as envelopes, ``sendMessage`` replies.

A webhook delivery carries ``X-Telegram-Bot-Api-Secret-Token``, the secret given to
``setWebhook``; it is compared in constant time. An update is keyed by its
``update_id`` (the delivery) and by the chat's ``message_id`` (the message). A
private chat is a direct message; in a group the bot is addressed by an
``@username`` mention entity, a ``text_mention`` of the bot, or a reply to one of
the bot's messages. Edits, channel posts and other update types are ignored.

The Bot API has no idempotency key and a bot cannot read a chat's history, so
an attempt after an unknown outcome cannot be reconciled: palyra sends again
(at most once per unknown outcome) and says so in the log.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

import httpx
import msgspec

from palyra.channels.adapters._http_client import platform_client
from palyra.channels.outbox import DeliveryUnknown, OutboundReply
from palyra.channels.routing import Envelope
from palyra.core.errors import ErrorCode, InvalidArgument, PalyraError

SECRET_HEADER = "x-telegram-bot-api-secret-token"
MAX_CHARS = 4096
"""Telegram's limit on one message's text."""
ALLOWED_UPDATES = ("message",)


class User(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    is_bot: bool = False
    first_name: str = ""
    last_name: str = ""
    username: str = ""


class Chat(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    type: str


class Entity(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    offset: int
    length: int
    user: User | None = None


class Quoted(msgspec.Struct, frozen=True, kw_only=True):
    """The message a message replies to (only what palyra reads of it)."""

    message_id: int
    from_: User | None = msgspec.field(default=None, name="from")
    text: str = ""
    caption: str = ""


class Message(msgspec.Struct, frozen=True, kw_only=True):
    message_id: int
    chat: Chat
    date: int = 0
    from_: User | None = msgspec.field(default=None, name="from")
    text: str = ""
    caption: str = ""
    entities: list[Entity] = []
    caption_entities: list[Entity] = []
    message_thread_id: int = 0
    is_topic_message: bool = False
    reply_to_message: Quoted | None = None
    photo: list[Any] = []
    document: Any = None
    video: Any = None
    voice: Any = None
    audio: Any = None
    sticker: Any = None


class Update(msgspec.Struct, frozen=True, kw_only=True):
    update_id: int
    message: Message | None = None


def verify(secret: str, headers: Mapping[str, str]) -> None:
    """Check the webhook's secret token header (constant time).

    Raises:
        PalyraError: ``SIGNATURE_INVALID`` when it is missing or wrong (or no
            secret is set: an endpoint without one accepts nothing).
    """
    offered = headers.get(SECRET_HEADER, "")
    if not secret or not offered or not hmac.compare_digest(offered.encode(), secret.encode()):
        raise PalyraError("Telegram webhook rejected: X-Telegram-Bot-Api-Secret-Token does "
                          "not match the secret set with setWebhook",
                          code=ErrorCode.SIGNATURE_INVALID)


def decode(body: bytes) -> Update:
    """One update.

    Raises:
        InvalidArgument: not a Bot API update.
    """
    try:
        return msgspec.json.decode(body, type=Update)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidArgument(f"malformed Telegram update: {exc}") from None


def decode_updates(body: bytes) -> list[Update]:
    """The ``result`` of a ``getUpdates`` answer.

    Raises:
        InvalidArgument: not a Bot API answer of that shape.
    """
    try:
        answer = msgspec.json.decode(body, type=_UpdatesAnswer)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidArgument(f"malformed getUpdates answer: {exc}") from None
    if not answer.ok:
        raise RuntimeError(f"getUpdates failed: {answer.description}")
    return answer.result


class _UpdatesAnswer(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool
    result: list[Update] = []
    description: str = ""


def bot_id(bot_token: str) -> int:
    """The bot's own user id: the part of its token before the colon."""
    head = bot_token.partition(":")[0]
    return int(head) if head.isdigit() else 0


def _addresses_bot(msg: Message, me: int, username: str) -> tuple[bool, str]:
    """Whether the message addresses the bot, and its text without the bot's mention."""
    text = msg.text or msg.caption
    entities = msg.entities or msg.caption_entities
    handle = f"@{username}".lower() if username else ""
    # Entity offsets count UTF-16 code units: cut on the UTF-16 form.
    units = text.encode("utf-16-le")
    cut: list[tuple[int, int]] = []
    for e in entities:
        word = units[2 * e.offset:2 * (e.offset + e.length)].decode("utf-16-le", "replace")
        if (e.type == "mention" and handle and word.lower() == handle) or (
                e.type == "text_mention" and e.user is not None and e.user.id == me):
            cut.append((e.offset, e.length))
    replied = (msg.reply_to_message is not None and msg.reply_to_message.from_ is not None
               and msg.reply_to_message.from_.id == me)
    for offset, length in sorted(cut, reverse=True):
        units = units[:2 * offset] + units[2 * (offset + length):]
    stripped = " ".join(units.decode("utf-16-le", "replace").split()) if cut else text
    return bool(cut) or replied, stripped


def envelope(channel: str, update: Update, *, me: int, username: str) -> Envelope | None:
    """The envelope of a ``message`` update; None for what palyra ignores (other update
    types, messages from bots, service messages without text or media)."""
    msg = update.message
    if msg is None or msg.from_ is None or msg.from_.is_bot:
        return None
    # Plain tests, not a generator over a tuple: this runs for every update.
    has_media = bool(msg.photo) or not (
        msg.document is None and msg.video is None and msg.voice is None
        and msg.audio is None and msg.sticker is None)
    if not (msg.text or msg.caption or has_media):
        return None
    private = msg.chat.type == "private"
    mentioned, text = _addresses_bot(msg, me, username)
    sender = msg.from_
    quoted = msg.reply_to_message
    quoted_from = quoted.from_ if quoted is not None else None
    return Envelope(
        envelope_id="", channel=channel, conversation_id=str(msg.chat.id),
        thread_id=str(msg.message_thread_id) if msg.is_topic_message else "",
        sender=str(sender.id),
        sender_display=sender.username or _full_name(sender.first_name, sender.last_name),
        sender_verified=True, text=text, is_direct_message=private,
        adapter_message_id=str(msg.message_id), mentions_agent=mentioned and not private,
        quoted_text=(quoted.text or quoted.caption) if quoted is not None and quoted_from
        is not None and quoted_from.id != me else "",
        quoted_sender=str(quoted_from.id) if quoted_from is not None
        and quoted_from.id != me else "",
        has_media=has_media)


def _full_name(first: str, last: str) -> str:
    return f"{first} {last}" if first and last else first or last


class BotApi:
    """The few Bot API methods palyra calls, over one shared HTTP client."""

    def __init__(self, api_base_url: str, bot_token: str, *,
                 client: httpx.AsyncClient | None = None, timeout_s: float = 10.0) -> None:
        self._base = f"{api_base_url.rstrip('/')}/bot{bot_token}"
        self._client = client or platform_client(timeout_s)

    def call(self, method: str, body: Mapping[str, Any], *,
             timeout_s: float | None = None) -> Awaitable[httpx.Response]:
        """The client's own awaitable for the call (no frame of this method around it)."""
        kwargs: dict[str, Any] = {"json": dict(body)}
        if timeout_s is not None:
            kwargs["timeout"] = timeout_s
        return self._client.post(f"{self._base}/{method}", **kwargs)

    async def get_updates(self, offset: int, timeout_s: int,
                          allowed: Sequence[str] = ALLOWED_UPDATES) -> list[Update]:
        """Long-poll for updates from ``offset`` on (earlier ones are confirmed and dropped)."""
        answer = await self.call("getUpdates", {
            "offset": offset, "timeout": timeout_s, "allowed_updates": list(allowed)},
            timeout_s=timeout_s + 10)
        if answer.status_code == 409:
            raise RuntimeError("getUpdates refused: a webhook is set for this bot "
                               "(deleteWebhook first, or use mode = \"webhook\")")
        answer.raise_for_status()
        return decode_updates(answer.content)

    async def set_webhook(self, url: str, secret: str) -> None:
        answer = await self.call("setWebhook", {
            "url": url, "secret_token": secret, "allowed_updates": list(ALLOWED_UPDATES),
            "drop_pending_updates": False})
        data = answer.json()
        if answer.status_code != 200 or not data.get("ok"):
            raise RuntimeError(f"setWebhook failed: {data.get('description', answer.text)}")

    async def aclose(self) -> None:
        await self._client.aclose()


class TelegramSink:
    """Replies through ``sendMessage`` (to the chat, the forum topic, and as a reply)."""

    max_chars = MAX_CHARS

    def __init__(self, name: str, api: BotApi, *, rate_per_s: float = 20.0) -> None:
        self.name = name
        self.rate_per_s = rate_per_s
        self._api = api

    async def send(self, reply: OutboundReply) -> None:
        body: dict[str, Any] = {"chat_id": int(reply.conversation_id)
                                if reply.conversation_id.lstrip("-").isdigit()
                                else reply.conversation_id, "text": reply.text}
        if reply.thread_id:
            body["message_thread_id"] = int(reply.thread_id)
        if reply.reply_to.isdigit():
            body["reply_parameters"] = {"message_id": int(reply.reply_to),
                                        "allow_sending_without_reply": True}
        try:
            answer = await self._api.call("sendMessage", body)
        except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.RemoteProtocolError) as exc:
            raise DeliveryUnknown(str(exc)) from exc
        if answer.status_code == 429:  # honour retry_after through the task's backoff
            retry = (answer.json().get("parameters") or {}).get("retry_after", 1)
            raise RuntimeError(f"sendMessage rate limited; retry after {retry} s")
        answer.raise_for_status()
        if not answer.json().get("ok"):
            raise RuntimeError(f"sendMessage failed: {answer.json().get('description')}")

    async def delivered(self, reply: OutboundReply) -> bool:
        # A bot can neither read the chat back nor pass an idempotency key: resend.
        return False

    async def aclose(self) -> None:
        await self._api.aclose()
