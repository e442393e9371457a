"""The four adapters as ``python -m bench ingress`` drives them: config, signed requests, replies.

Each platform gives the daemon's config for one adapter whose policy answers every
message, builds distinct events (one conversation each: a message to a conversation
with a run in flight joins that run instead of getting its own reply), signs them with
the platform's own library (``standardwebhooks``, ``slack_sdk``, Telegram's secret
header, PyNaCl for Discord's Ed25519), and reads the replies back from the local fake
of the platform, keyed by the event they answer.
"""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol

from palyra.testing.discord import FakeDiscord
from palyra.testing.platforms import FakeSlack, WebhookReceiver, slack_headers, webhook_headers
from palyra.testing.telegram import FakeTelegram

SECRET = "whsec_" + base64.b64encode(b"inbound-key-of-the-ingress-bench").decode()
REPLY_SECRET = "whsec_" + base64.b64encode(b"reply-key-of-the-ingress-bench!!").decode()
SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
SLACK_TOKEN = "xoxb-bench-token"
TELEGRAM_TOKEN = "123456:AAE-bench-token"
TELEGRAM_SECRET = "bench-secret-token_0123456789"
DISCORD_TOKEN = "MTAwMDAw.bench-token"

_POLICY = """
dm_policy = "allow"
mentions = ["*"]
concurrency = 8
"""


@dataclass(frozen=True, slots=True)
class Event:
    key: str  # what the replies to it carry back (its conversation, or its interaction)
    delivery: str  # the platform's delivery id (redeliveries keep it)
    body: bytes


class Platform(Protocol):
    name: str
    path: str
    fake: Any

    def config(self) -> str: ...
    def event(self, tag: str, i: int) -> Event: ...
    def headers(self, event: Event, *, again: bool) -> dict[str, str]: ...
    def replies(self) -> Counter[str]:
        """Distinct replies shown per event key (after the platform's own dedupe)."""
    def raw_replies(self) -> int: ...
    def duplicate_replies(self) -> int: ...
    def admitted(self, answer: dict[str, Any]) -> bool: ...


def _accepted(answer: dict[str, Any]) -> bool:
    return bool(answer.get("accepted")) and not answer.get("duplicate")


class Webhooks:
    name, path = "webhook", "/v1/ingress/webhooks/hooks"

    def __init__(self) -> None:
        self.fake = WebhookReceiver(REPLY_SECRET)

    def config(self) -> str:
        # The outbound limits (20/s and the like) would make the drain measure the limiter.
        return (f'[channels.webhooks.hooks]\nsecrets = ["{SECRET}"]\n'
                f'reply_url = "{self.fake.url}/replies"\nreply_secret = "{REPLY_SECRET}"\n'
                f'rate_per_s = 10000.0\n[channels.policy."webhook:hooks"]' + _POLICY)

    def event(self, tag: str, i: int) -> Event:
        body = json.dumps({"type": "message.created", "timestamp": "2026-11-25T00:00:00Z",
                           "data": {"text": f"bench message {i}", "sender": f"user-{i % 97}",
                                    "conversation_id": f"room-{tag}-{i}",
                                    "message_id": f"{tag}-{i}"}}).encode()
        return Event(f"{tag}-{i}", f"msg_{tag}_{i}", body)

    def headers(self, event: Event, *, again: bool) -> dict[str, str]:
        return webhook_headers(SECRET, event.delivery, event.body)

    def replies(self) -> Counter[str]:
        return Counter(r["reply_to"] for r in self.fake.replies())

    def raw_replies(self) -> int:
        return len(self.fake.raw)

    def duplicate_replies(self) -> int:
        return int(self.fake.duplicate_replies())

    def admitted(self, answer: dict[str, Any]) -> bool:
        return _accepted(answer)


class Slack:
    name, path = "slack", "/v1/ingress/slack/acme"

    def __init__(self) -> None:
        self.fake = FakeSlack(SLACK_TOKEN)

    def config(self) -> str:
        return (f'[channels.slack.acme]\nsigning_secret = "{SLACK_SECRET}"\n'
                f'bot_token = "{SLACK_TOKEN}"\napi_base_url = "{self.fake.api_url}"\n'
                'bot_user_id = "UBOT"\nrate_per_s = 10000.0\n'
                '[channels.policy."slack:acme"]' + _POLICY)

    def event(self, tag: str, i: int) -> Event:
        channel = f"C{tag.upper()}{i}"
        body = json.dumps({
            "type": "event_callback", "team_id": "TBENCH", "api_app_id": "ABENCH",
            "event_id": f"Ev{tag}{i}", "event_time": int(time.time()),
            "event": {"type": "app_mention", "channel": channel, "user": f"U{i % 97}",
                      "text": f"<@UBOT> bench message {i}",
                      "ts": f"{1764201600 + i}.000100"}}).encode()
        return Event(channel, f"Ev{tag}{i}", body)

    def headers(self, event: Event, *, again: bool) -> dict[str, str]:
        return slack_headers(SLACK_SECRET, event.body, retry_num=1 if again else None)

    def replies(self) -> Counter[str]:
        with self.fake.lock:  # the fake's threads post meanwhile
            return Counter({channel: len({(m.get("metadata") or {}).get("event_payload", {})
                                          .get("key") for m in msgs})
                            for channel, msgs in self.fake.messages.items()})

    def raw_replies(self) -> int:
        return int(self.fake.posts)

    def duplicate_replies(self) -> int:
        return int(self.fake.duplicate_replies())

    def admitted(self, answer: dict[str, Any]) -> bool:
        return _accepted(answer)


class Telegram:
    name, path = "telegram", "/v1/ingress/telegram/bot"
    _BASE = {"warm": 1_000_000, "load": 2_000_000, "race": 3_000_000}

    def __init__(self) -> None:
        self.fake = FakeTelegram(TELEGRAM_TOKEN)

    def config(self) -> str:
        return (f'[channels.telegram.bot]\nbot_token = "{TELEGRAM_TOKEN}"\n'
                f'bot_username = "palyra_bot"\nwebhook_secret = "{TELEGRAM_SECRET}"\n'
                f'api_base_url = "{self.fake.url}"\nrate_per_s = 10000.0\n'
                '[channels.policy."telegram:bot"]' + _POLICY)

    def event(self, tag: str, i: int) -> Event:
        update_id = self._BASE[tag] + i
        user = {"id": update_id, "is_bot": False, "first_name": f"User {i}"}
        body = json.dumps({"update_id": update_id, "message": {
            "message_id": i + 1, "date": int(time.time()), "text": f"bench message {i}",
            "chat": {"id": update_id, "type": "private", "first_name": f"User {i}"},
            "from": user}}).encode()
        return Event(str(update_id), str(update_id), body)

    def headers(self, event: Event, *, again: bool) -> dict[str, str]:
        return {"x-telegram-bot-api-secret-token": TELEGRAM_SECRET,
                "content-type": "application/json"}

    def replies(self) -> Counter[str]:
        return Counter(str(r["chat_id"]) for r in self.fake.replies())

    def raw_replies(self) -> int:
        return len(self.fake.replies())

    def duplicate_replies(self) -> int:
        return int(self.fake.duplicate_replies())

    def admitted(self, answer: dict[str, Any]) -> bool:
        return _accepted(answer)


_TAG_CHANNELS = {"warm": 0, "load": 10**6, "race": 2 * 10**6}  # disjoint channel ids per tag


class DiscordInteractions:
    """Slash commands over HTTP (the Gateway has no request to time an ack on)."""

    name, path = "discord", "/v1/ingress/discord/app"

    def __init__(self) -> None:
        self.fake = FakeDiscord(DISCORD_TOKEN)

    def config(self) -> str:
        return (f'[channels.discord.app]\npublic_key = "{self.fake.public_key}"\n'
                f'api_base_url = "{self.fake.api_url}"\n'
                '[channels.policy."discord:app"]' + _POLICY)

    def event(self, tag: str, i: int) -> Event:
        # A channel of its own per event, as the other platforms' conversations: with
        # ``10**15 + i`` alone, load event i < 16 went to warm-up event i's channel (a
        # second message in a conversation, so its run assembled the recent turns and
        # loaded the token counter's tokenizer, ~0.1 s holding the GIL, inside the
        # measured phase: Discord's ack p99 93-250 ms against 22-35 for the others).
        channel = 10**15 + _TAG_CHANNELS[tag] + i
        token, body = self.fake.interaction("ask", {"question": f"bench message {i}"},
                                            channel_id=str(channel), guild_id="1")
        return Event(token, token, body)

    def headers(self, event: Event, *, again: bool) -> dict[str, str]:
        return dict(self.fake.sign(event.body))

    def replies(self) -> Counter[str]:
        with self.fake.lock:
            return Counter({token: len(msgs) for token, msgs in self.fake.followups.items()})

    def raw_replies(self) -> int:
        return sum(self.replies().values())

    def duplicate_replies(self) -> int:
        return sum(n - 1 for n in self.replies().values() if n > 1)

    def admitted(self, answer: dict[str, Any]) -> bool:
        # Discord's answer says "deferred", not whether it was a redelivery: the first
        # answer of an event counts, and the replies show any second run.
        return answer.get("type") == 5


PLATFORMS: dict[str, type[Webhooks | Slack | Telegram | DiscordInteractions]] = {
    "webhook": Webhooks, "slack": Slack, "telegram": Telegram, "discord": DiscordInteractions}
