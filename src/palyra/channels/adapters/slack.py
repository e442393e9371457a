"""Slack Events API: ``v0`` request signatures, the URL handshake, mentions and DMs, replies.

Slack signs ``v0:{X-Slack-Request-Timestamp}:{body}`` with the app's signing
secret (HMAC-SHA256, hex, ``v0=`` prefix) and retries a delivery it did not
see acknowledged within 3 s (``X-Slack-Retry-Num``, ``X-Slack-Retry-Reason``).
palyra acknowledges as soon as the event is durable (the run goes on after),
and a retry is deduplicated on ``(team, event_id)`` like any redelivery.

Replies go through ``chat.postMessage`` carrying the reply's idempotency key in
the message ``metadata``; when an earlier attempt's outcome is unknown the
next one reads the conversation back (``conversations.history`` /
``conversations.replies`` with ``include_all_metadata``) and sends only if the
key is not there.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

import httpx
import msgspec

from palyra.channels.adapters._body import decode_body
from palyra.channels.adapters._http_client import platform_client
from palyra.channels.adapters._timestamps import check_fresh
from palyra.channels.outbox import DeliveryUnknown, OutboundReply
from palyra.channels.routing import Envelope
from palyra.core.errors import ErrorCode, PalyraError

TOLERANCE_S = 300
METADATA_EVENT = "palyra_reply"
_HANDLED = ("app_mention", "message")


class SlackEvent(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    channel: str = ""
    channel_type: str = ""
    user: str = ""
    text: str = ""
    ts: str = ""
    thread_ts: str = ""
    bot_id: str = ""
    subtype: str = ""
    files: list[Any] = []


class Callback(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    challenge: str = ""
    team_id: str = ""
    api_app_id: str = ""
    event_id: str = ""
    event: SlackEvent | None = None


def verify(signing_secret: str, headers: Mapping[str, str], body: bytes, *,
           now_s: float | None = None) -> None:
    """Check ``X-Slack-Signature`` and the 5-minute window.

    Raises:
        PalyraError: ``SIGNATURE_INVALID``, ``TIMESTAMP_STALE``.
    """
    stamp = headers.get("x-slack-request-timestamp", "")
    signature = headers.get("x-slack-signature", "")
    if not stamp or not signature:
        raise _bad("X-Slack-Request-Timestamp and X-Slack-Signature are required")
    check_fresh(stamp, "X-Slack-Request-Timestamp", TOLERANCE_S, now_s, "Slack")
    base = f"v0:{stamp}:".encode() + body
    expected = "v0=" + hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signature):
        raise _bad("the signature does not match the signing secret")


def _bad(why: str) -> PalyraError:
    return PalyraError(f"Slack signature rejected: {why}", code=ErrorCode.SIGNATURE_INVALID)


def decode(body: bytes) -> Callback:
    """The callback body.

    Raises:
        InvalidArgument: not a Slack Events API body.
    """
    return decode_body(body, Callback, "Slack")


def envelope(channel: str, callback: Callback, bot_user_id: str) -> Envelope | None:
    """The envelope of an ``app_mention`` or ``message.im`` event; None for events palyra
    ignores (other types, edits and other subtypes, the bot's own messages)."""
    event = callback.event
    if event is None or event.type not in _HANDLED or event.subtype or event.bot_id:
        return None
    if not event.user or (bot_user_id and event.user == bot_user_id):
        return None
    is_dm = event.channel_type == "im"
    if event.type == "message" and not is_dm:
        return None  # channel chatter arrives as app_mention when it addresses the bot
    return Envelope(
        envelope_id="", channel=channel, conversation_id=event.channel,
        thread_id=event.thread_ts, sender=event.user, sender_verified=True, text=event.text,
        is_direct_message=is_dm, adapter_message_id=event.ts,
        mentions_agent=event.type == "app_mention", has_media=bool(event.files))


class SlackSink:
    """Replies through the Web API's ``chat.postMessage``."""

    def __init__(self, name: str, api_base_url: str, bot_token: str, *,
                 rate_per_s: float = 1.0, client: httpx.AsyncClient | None = None,
                 timeout_s: float = 10.0) -> None:
        self.name = name
        self.rate_per_s = rate_per_s
        self._base = api_base_url.rstrip("/")
        self._headers = {"authorization": f"Bearer {bot_token}"}
        self._client = client or platform_client(timeout_s)

    async def send(self, reply: OutboundReply) -> None:
        body: dict[str, Any] = {
            "channel": reply.conversation_id, "text": reply.text,
            "metadata": {"event_type": METADATA_EVENT, "event_payload": {"key": reply.key}}}
        if reply.thread_id:
            body["thread_ts"] = reply.thread_id
        try:
            answer = await self._client.post(f"{self._base}/chat.postMessage", json=body,
                                             headers=self._headers)
        except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.RemoteProtocolError) as exc:
            raise DeliveryUnknown(str(exc)) from exc
        answer.raise_for_status()  # 429 (rate limited) and 5xx: retried with backoff
        data = answer.json()
        if not data.get("ok"):
            raise RuntimeError(f"chat.postMessage failed: {data.get('error', 'unknown')}")

    async def delivered(self, reply: OutboundReply) -> bool:
        params = {"channel": reply.conversation_id, "include_all_metadata": "true",
                  "limit": "200"}
        method = "conversations.history"
        if reply.thread_id:
            method, params["ts"] = "conversations.replies", reply.thread_id
        answer = await self._client.get(f"{self._base}/{method}", params=params,
                                        headers=self._headers)
        answer.raise_for_status()
        for message in answer.json().get("messages", []):
            meta = message.get("metadata") or {}
            if (meta.get("event_type") == METADATA_EVENT
                    and (meta.get("event_payload") or {}).get("key") == reply.key):
                return True
        return False

    async def aclose(self) -> None:
        await self._client.aclose()
