"""Channel settings (``[channels]`` in TOML): the router's policy per channel and the adapters.

Safe by default (REFERENCE Part B 10): the router is on, direct messages go through
pairing, broadcasts are refused, and group messages are answered only when they
mention the agent. A channel without its own ``[channels.policy."<channel>"]``
table uses ``[channels.default]``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Literal

DmPolicy = Literal["deny", "pairing", "allow"]
BroadcastPolicy = Literal["deny", "mention_only", "allow"]
DmScope = Literal["shared", "per_sender", "per_channel_sender"]

MAX_TEXT_BYTES = 32 * 1024
"""An inbound message's text above this is refused and quarantined (REFERENCE §7)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ChannelPolicy:
    """How one channel's messages are routed.

    Attributes:
        mentions: Patterns that address the agent in a group message
            (case-insensitive, identifier-bounded; ``*`` matches anything;
            ``@everyone``/``@here`` count only when listed).
        allow_direct_messages: Direct messages are considered at all.
        dm_policy: ``deny``, ``pairing`` (a paired sender only; ``pair CODE``
            starts pairing) or ``allow``.
        dm_scope: One ``shared`` DM session, one ``per_sender``, or one per
            channel and sender (``per_channel_sender``).
        allow_from: If non-empty, only these senders are answered.
        strict_allow: ``allow_from`` also needs the adapter to have verified the sender.
        deny_from: Senders never answered (their messages are still kept for context).
        broadcast: ``deny``, ``mention_only`` or ``allow`` for @everyone/@here posts.
        isolate_session_by_sender: Group conversations get one session per sender.
        concurrency: Runs in flight at once for this channel; more wait in the
            durable retry queue.
        max_retries: Attempts of a message that finds every slot busy before it is
            quarantined.
        slot_wait_s: How long one attempt waits for a slot before it goes back to
            the retry queue (freeing its worker for other channels).
        reply_prefix: Put before every reply.
        reply_max_bytes: Replies are split into chunks of at most this many UTF-8 bytes.
        auto_ack: If set, sent at once when a message is admitted, before the run.
        debounce_ms: Quiet window of the coalescer (0: every message is its own run).
        max_wait_ms: No message waits in the coalescer longer than this.
        batch_cap: At most this many messages are coalesced into one run.
        pairing_hint_interval_s: An unpaired sender's direct message (``dm_policy =
            "pairing"``) is answered with how to pair, at most once per sender in this
            many seconds (0: never).
    """

    mentions: tuple[str, ...] = ("@palyra",)
    allow_direct_messages: bool = True
    dm_policy: DmPolicy = "pairing"
    dm_scope: DmScope = "per_sender"
    allow_from: tuple[str, ...] = ()
    strict_allow: bool = True
    deny_from: tuple[str, ...] = ()
    broadcast: BroadcastPolicy = "deny"
    isolate_session_by_sender: bool = False
    concurrency: int = 2
    max_retries: int = 3
    slot_wait_s: float = 5.0
    reply_prefix: str = ""
    reply_max_bytes: int = 3000
    auto_ack: str = ""
    debounce_ms: int = 0
    max_wait_ms: int = 5000
    batch_cap: int = 16
    pairing_hint_interval_s: int = 3600

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if not 0 < self.slot_wait_s <= 300:
            raise ValueError("slot_wait_s must be in (0, 300]")
        if self.reply_max_bytes < 64:
            raise ValueError("reply_max_bytes must be at least 64")
        if self.debounce_ms < 0 or self.max_wait_ms < self.debounce_ms:
            raise ValueError("max_wait_ms must be at least debounce_ms (and both >= 0)")
        if not 1 <= self.batch_cap <= 256:
            raise ValueError("batch_cap must be 1..256")
        if self.pairing_hint_interval_s < 0:
            raise ValueError("pairing_hint_interval_s must be >= 0")


@dataclasses.dataclass(frozen=True, slots=True)
class SlackAdapterConfig:
    """A Slack app speaking the Events API (``[channels.slack.<name>]``).

    Attributes:
        signing_secret: The app's signing secret (``v0`` signatures).
        bot_token: ``xoxb-`` token replies are posted with.
        api_base_url: Web API base (tests point it at a local fake).
        bot_user_id: The bot's own user id; its messages are ignored and
            ``<@ID>`` counts as a mention.
        rate_per_s: Outbound ``chat.postMessage`` calls per second.
    """

    signing_secret: str = ""
    bot_token: str = ""
    api_base_url: str = "https://slack.com/api"
    bot_user_id: str = ""
    rate_per_s: float = 1.0

    def __post_init__(self) -> None:
        if not self.signing_secret:
            raise ValueError("signing_secret is required (Slack app settings, Basic Information)")


@dataclasses.dataclass(frozen=True, slots=True)
class WebhookAdapterConfig:
    """A Standard Webhooks endpoint (``[channels.webhooks.<name>]``).

    Attributes:
        secrets: Inbound verification keys: ``whsec_<base64>`` (``v1``, HMAC-SHA256)
            or ``whpk_<base64>`` (``v1a``, ed25519 public key). Several for rotation.
        reply_url: Where replies are POSTed (signed), empty for none.
        reply_secret: ``whsec_...`` or ``whsk_<base64 ed25519 private key>`` for replies.
        tolerance_s: Accepted clock skew of ``webhook-timestamp``.
        rate_per_s: Outbound deliveries per second.
    """

    secrets: tuple[str, ...] = ()
    reply_url: str = ""
    reply_secret: str = ""
    tolerance_s: int = 300
    rate_per_s: float = 20.0

    def __post_init__(self) -> None:
        if not self.secrets:
            raise ValueError("secrets needs at least one whsec_ or whpk_ key")
        for secret in self.secrets:
            if not secret.startswith(("whsec_", "whpk_")):
                raise ValueError("secrets take whsec_<base64> or whpk_<base64> keys")
        if self.reply_url and not self.signing_secret:
            raise ValueError("reply_url needs reply_secret (whsec_ or whsk_), or a whsec_ "
                             "key in secrets")

    @property
    def signing_secret(self) -> str:
        """The key replies are signed with."""
        return self.reply_secret or next(
            (s for s in self.secrets if s.startswith("whsec_")), "")


TelegramMode = Literal["webhook", "polling"]


@dataclasses.dataclass(frozen=True, slots=True)
class TelegramAdapterConfig:
    """A Telegram bot (``[channels.telegram.<name>]``, channel ``telegram:<name>``).

    Attributes:
        bot_token: The token @BotFather gave (``123456:ABC...``); its number is the bot's id.
        bot_username: The bot's username without ``@``: ``@username`` addresses it in groups.
        mode: ``webhook`` (Telegram POSTs to ``/v1/ingress/telegram/<name>``; set it up with
            ``palyra channels connect telegram <name> --url ...``) or ``polling``
            (``getUpdates``, for a daemon Telegram cannot reach).
        webhook_secret: The ``secret_token`` given to ``setWebhook``; empty: the one
            ``palyra channels connect`` generated and stored in the data dir.
        api_base_url: Bot API base (tests point it at a local fake).
        poll_timeout_s: Long-polling wait of one ``getUpdates`` call.
        rate_per_s: Outbound ``sendMessage`` calls per second.
    """

    bot_token: str = ""
    bot_username: str = ""
    mode: TelegramMode = "webhook"
    webhook_secret: str = ""
    api_base_url: str = "https://api.telegram.org"
    poll_timeout_s: int = 25
    rate_per_s: float = 20.0

    def __post_init__(self) -> None:
        if ":" not in self.bot_token or not self.bot_token.partition(":")[0].isdigit():
            raise ValueError("bot_token is required, as @BotFather gave it (123456:ABC...)")
        if self.mode not in ("webhook", "polling"):
            raise ValueError("mode is webhook or polling")
        if not 1 <= self.poll_timeout_s <= 50:
            raise ValueError("poll_timeout_s must be 1..50")


@dataclasses.dataclass(frozen=True, slots=True)
class DiscordAdapterConfig:
    """A Discord bot (``[channels.discord.<name>]``, channel ``discord:<name>``).

    Attributes:
        bot_token: The bot's token (Developer Portal, Bot); the bot needs the Message
            Content intent to read guild messages that mention it.
        api_base_url: REST API base (tests point it at a local fake).
        gateway_url: Gateway WebSocket URL (Discord's ``GET /gateway/bot`` names it).
        rate_per_s: Outbound messages per second on top of Discord's own rate-limit
            buckets (0: the buckets alone).
        public_key: The application's public key (hex, Developer Portal, General
            Information): slash commands POSTed to ``/v1/ingress/discord/<name>`` are
            checked against it; empty: the interactions endpoint answers 404.
    """

    bot_token: str = ""
    api_base_url: str = "https://discord.com/api/v10"
    gateway_url: str = "wss://gateway.discord.gg"
    rate_per_s: float = 0.0
    public_key: str = ""

    def __post_init__(self) -> None:
        if not self.bot_token and not self.public_key:
            raise ValueError("bot_token (the Gateway) or public_key (slash commands over "
                             "HTTP) is required (Developer Portal)")
        if self.public_key:
            try:
                size = len(bytes.fromhex(self.public_key))
            except ValueError:
                size = -1
            if size != 32:
                raise ValueError("public_key must be the 64 hex digits the Developer Portal "
                                 "shows")


@dataclasses.dataclass(frozen=True, slots=True)
class ChannelsConfig:
    """The channel router, its dedupe window and the adapters.

    Attributes:
        enabled: RouteMessage and the adapter ingress routes answer at all.
        dedupe_window_s: A redelivered event inside this window starts nothing and
            gets the stored outcome (durable). 48 h by default: Slack retries for 5
            minutes, Standard Webhooks senders for about 27 hours.
        max_body_bytes: Largest adapter request body.
        default: The policy of every channel without its own table.
        policy: Per-channel policies, keyed by channel id (``slack:T0123``).
        slack: Slack apps, keyed by a name (channel ``slack:<name>``).
        webhooks: Standard Webhooks endpoints, keyed by a name (channel ``webhook:<name>``).
        telegram: Telegram bots, keyed by a name (channel ``telegram:<name>``).
        discord: Discord bots, keyed by a name (channel ``discord:<name>``).
        pairing_code_ttl_s: Default lifetime of a pairing code (30 s .. 24 h).
        pairing_grant_ttl_s: Lifetime of a grant approved ``allow_session``.
    """

    enabled: bool = True
    dedupe_window_s: int = 48 * 3600
    max_body_bytes: int = 256 * 1024
    default: ChannelPolicy = dataclasses.field(default_factory=ChannelPolicy)
    policy: Mapping[str, ChannelPolicy] = dataclasses.field(default_factory=dict)
    slack: Mapping[str, SlackAdapterConfig] = dataclasses.field(default_factory=dict)
    webhooks: Mapping[str, WebhookAdapterConfig] = dataclasses.field(default_factory=dict)
    telegram: Mapping[str, TelegramAdapterConfig] = dataclasses.field(default_factory=dict)
    discord: Mapping[str, DiscordAdapterConfig] = dataclasses.field(default_factory=dict)
    pairing_code_ttl_s: int = 600
    pairing_grant_ttl_s: int = 30 * 24 * 3600

    def configured(self, channel: str) -> bool:
        """Whether ``channel`` is named in the config: its own policy table, or an
        adapter's (``slack:<name>``, ``webhook:<name>``, ``telegram:<name>``, ``discord:<name>``)."""
        kind, _, name = channel.partition(":")
        adapters = {"slack": self.slack, "webhook": self.webhooks, "telegram": self.telegram,
                    "discord": self.discord}.get(kind)
        return channel in self.policy or (adapters is not None and name in adapters)

    def policy_for(self, channel: str) -> ChannelPolicy:
        """The channel's own policy, else the default."""
        return self.policy.get(channel) or self.default
