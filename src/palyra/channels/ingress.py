"""HTTP ingress of the adapters, transport-free: headers and body in, status and JSON out.

Order matters for "nothing is journaled on bad input": size, then signature and
timestamp, then the payload's shape, and only then admission (one commit).
The platform is answered only after that commit, so an acknowledged delivery
is never lost; a redelivery gets the stored outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from palyra.channels.adapters import slack, standard_webhooks
from palyra.channels.config import ChannelsConfig
from palyra.channels.router import Admission, ChannelRouter
from palyra.core.errors import ErrorCode, NotFound, PalyraError

SLACK_PREFIX = "slack:"
WEBHOOK_PREFIX = "webhook:"


class Ingress:
    """Verifies, parses and admits Slack and Standard Webhooks deliveries."""

    def __init__(self, router: ChannelRouter, config: ChannelsConfig) -> None:
        self._router = router
        self._config = config

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


def _answer(admission: Admission) -> dict[str, Any]:
    return {"accepted": admission.accepted, "envelope_id": admission.envelope_id,
            "duplicate": admission.duplicate, "reason": admission.reason}
