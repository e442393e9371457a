"""HTTP ingress of the adapters, transport-free: headers and body in, status and JSON out.

Order matters for "nothing is journaled on bad input": size, then signature and
timestamp, then the payload's shape, and only then admission (one commit).
The platform is answered only after that commit, so an acknowledged delivery
is never lost; a redelivery gets the stored outcome.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from palyra.channels import notices, records
from palyra.channels.adapters import (
    discord,
    discord_interactions,
    slack,
    standard_webhooks,
    telegram,
)
from palyra.channels.adapters.telegram import Update as TelegramUpdate
from palyra.channels.config import ChannelsConfig
from palyra.channels.router import Admission, ChannelRouter
from palyra.core.errors import ErrorCode, InvalidArgument, NotFound, PalyraError
from palyra.journal import EntityWrite

SLACK_PREFIX = "slack:"
WEBHOOK_PREFIX = "webhook:"
TELEGRAM_PREFIX = "telegram:"
DISCORD_PREFIX = "discord:"


def telegram_secret_path(data_dir: Path, name: str) -> Path:
    """Where ``palyra channels connect telegram NAME`` keeps the webhook's secret token."""
    return data_dir / "channels" / f"telegram-{name}.secret"


def offset_key(channel: str) -> str:
    """The row of a long-polling adapter's next offset (``channels`` table)."""
    return f"poll.offset:{channel}"


class Ingress:
    """Verifies, parses and admits Slack, Standard Webhooks, Telegram and Discord deliveries."""

    def __init__(self, router: ChannelRouter, config: ChannelsConfig,
                 data_dir: Path | None = None) -> None:
        self._router = router
        self._config = config
        self._data_dir = data_dir
        self._secrets: dict[str, str] = {}  # stored Telegram secrets, read once
        # Discord applications' public keys, parsed once.
        self._discord_keys = {name: discord_interactions.public_key(app.public_key)
                              for name, app in config.discord.items() if app.public_key}

    def _check_size(self, body: bytes) -> None:
        if len(body) > self._config.max_body_bytes:
            raise PalyraError(f"delivery body exceeds {self._config.max_body_bytes} bytes",
                              code=ErrorCode.PAYLOAD_TOO_LARGE,
                              details={"limit_bytes": str(self._config.max_body_bytes)})

    async def webhook(self, name: str, headers: Mapping[str, str], body: bytes
                      ) -> dict[str, Any]:
        """One Standard Webhooks delivery.

        Raises:
            PalyraError: ``NOT_FOUND`` (no such endpoint), ``PAYLOAD_TOO_LARGE``,
                ``SIGNATURE_INVALID``, ``TIMESTAMP_STALE``, ``INVALID_ARGUMENT``.
        """
        cfg = self._config.webhooks.get(name)
        if cfg is None or not self._config.enabled:
            raise NotFound(f"no webhook endpoint {name!r}")
        self._check_size(body)
        msg_id = standard_webhooks.verify(cfg.secrets, headers, body,
                                          tolerance_s=cfg.tolerance_s)
        channel = WEBHOOK_PREFIX + name
        env = standard_webhooks.parse(channel, msg_id, body)
        if env is None:
            return {"accepted": False, "reason": "ignored_event_type"}
        return _answer(await self._router.admit(
            env, dedupe=("webhook", name, msg_id), sink=channel if cfg.reply_url else ""))

    async def slack(self, name: str, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
        """One Slack Events API request (the URL handshake or an event callback).

        Raises:
            PalyraError: as :meth:`webhook`.
        """
        cfg = self._config.slack.get(name)
        if cfg is None or not self._config.enabled:
            raise NotFound(f"no Slack app {name!r}")
        self._check_size(body)
        slack.verify(cfg.signing_secret, headers, body)
        callback = slack.decode(body)
        if callback.type == "url_verification":
            return {"challenge": callback.challenge}
        channel = SLACK_PREFIX + name
        env = slack.envelope(channel, callback, cfg.bot_user_id)
        if env is None or not callback.event_id:
            return {"accepted": False, "reason": "ignored_event"}
        retry = headers.get("x-slack-retry-num", "")
        if retry.isdigit():
            # A retry is processed like any delivery (never dropped); the dedupe key
            # makes it a no-op when the first one was admitted.
            env = msgspec.structs.replace(env, retry_attempt=int(retry))
        return _answer(await self._router.admit(
            env, dedupe=("slack", callback.team_id or callback.api_app_id, callback.event_id),
            sink=channel if cfg.bot_token else ""))

    def _telegram_secret(self, name: str, configured: str, fresh: bool) -> str:
        if configured:
            return configured
        if fresh or name not in self._secrets:
            path = telegram_secret_path(self._data_dir, name) if self._data_dir else None
            try:
                self._secrets[name] = path.read_text().strip() if path else ""
            except FileNotFoundError:
                self._secrets[name] = ""
        return self._secrets[name]

    def telegram(self, name: str, headers: Mapping[str, str], body: bytes
                 ) -> Coroutine[Any, Any, dict[str, Any]]:
        """One Telegram webhook delivery (an ``Update``): checked here, then admitted by
        :meth:`telegram_update`'s coroutine (handed back, no frame of this one around it).

        Raises:
            PalyraError: as :meth:`webhook`.
        """
        cfg = self._config.telegram.get(name)
        if cfg is None or not self._config.enabled or cfg.mode != "webhook":
            raise NotFound(f"no Telegram webhook {name!r}")
        self._check_size(body)
        try:
            telegram.verify(self._telegram_secret(name, cfg.webhook_secret, False), headers)
        except PalyraError:
            # `palyra channels connect` may have set a new secret since it was read.
            telegram.verify(self._telegram_secret(name, cfg.webhook_secret, True), headers)
        return self.telegram_update(name, telegram.decode(body))

    async def telegram_update(self, name: str, update: TelegramUpdate, *,
                              also: Sequence[EntityWrite] = ()) -> dict[str, Any]:
        """Admit one update (from the webhook, or from ``getUpdates`` with the offset in
        ``also``, so the offset moves in the same commit as the message)."""
        cfg = self._config.telegram[name]
        channel = TELEGRAM_PREFIX + name
        env = telegram.envelope(channel, update, me=telegram.bot_id(cfg.bot_token),
                                username=cfg.bot_username)
        if env is None:
            if also:
                await self._router.record(also, "channel.poll_offset")
            return {"accepted": False, "reason": "ignored_event"}
        admission = await self._router.admit(
            env, dedupe=("telegram", name, str(update.update_id)), sink=channel, also=also)
        if admission.duplicate and also:
            await self._router.record(also, "channel.poll_offset")
        return _answer(admission)

    async def record(self, writes: Sequence[EntityWrite], kind: str) -> None:
        """Commit an adapter's own state (a Gateway session) with no message."""
        await self._router.record(writes, kind)

    async def discord_message(self, name: str, data: Mapping[str, Any], *, me: str,
                              also: Sequence[EntityWrite] = ()) -> dict[str, Any]:
        """Admit one Gateway ``MESSAGE_CREATE`` (``data`` is its ``d``), with the Gateway
        session's new sequence in ``also`` so it moves in the admission's commit."""
        try:
            msg = msgspec.convert(data, discord.MessageCreate)
        except msgspec.ValidationError as exc:
            raise InvalidArgument(f"malformed Discord MESSAGE_CREATE: {exc}") from None
        channel = DISCORD_PREFIX + name
        env = discord.envelope(channel, msg, me=me)
        if env is None:
            return {"accepted": False, "reason": "ignored_event"}
        return _answer(await self._router.admit(
            env, dedupe=("discord", name, msg.id), sink=channel, also=also))

    async def discord_interaction(self, name: str, headers: Mapping[str, str], body: bytes
                                  ) -> dict[str, Any]:
        """One Discord interaction (a slash command, or Discord's ``PING``).

        Raises:
            PalyraError: ``NOT_FOUND`` (no such application, or no ``public_key``),
                ``PAYLOAD_TOO_LARGE``, ``SIGNATURE_INVALID``, ``TIMESTAMP_STALE``,
                ``INVALID_ARGUMENT``.
        """
        key = self._discord_keys.get(name)
        if key is None or not self._config.enabled:
            raise NotFound(f"no Discord interactions endpoint {name!r}")
        self._check_size(body)
        discord_interactions.verify(key, headers, body)
        interaction = discord_interactions.decode(body)
        if interaction.type == discord_interactions.PING:
            return {"type": discord_interactions.PONG}
        channel = DISCORD_PREFIX + name
        env = discord_interactions.envelope(channel, interaction)
        if env is None:
            raise InvalidArgument("palyra answers slash commands (application commands) only",
                                  details={"interaction_type": str(interaction.type)})
        # The interaction's own answer tells an unpaired sender how to pair, so the
        # router queues no hint of its own.
        admission = await self._router.admit(
            env, dedupe=("discord-interaction", name, interaction.id), sink=channel,
            hint=False)
        return discord_interactions.answer(admission.accepted, admission.reason,
                                           notices.PAIRING_HINT)


def offset_write(channel: str, next_offset: int) -> EntityWrite:
    return EntityWrite(records.TABLE, offset_key(channel), str(next_offset).encode())


def _answer(admission: Admission) -> dict[str, Any]:
    return {"accepted": admission.accepted, "envelope_id": admission.envelope_id,
            "duplicate": admission.duplicate, "reason": admission.reason}
