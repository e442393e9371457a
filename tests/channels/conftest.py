"""Shared set-up of the channel tests: keys, a config file, signed deliveries."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx

DEVICE = "01J00000000000000000000000"
WEBHOOK_SECRET = "whsec_" + base64.b64encode(b"inbound-key-of-the-tests-0123456").decode()
REPLY_SECRET = "whsec_" + base64.b64encode(b"reply-key-of-the-tests-012345678").decode()
SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
SLACK_TOKEN = "xoxb-test-token"


def admin_headers(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}", "x-palyra-principal": "admin:ops",
            "x-palyra-device-id": DEVICE}


def write_config(path: Path, *, reply_url: str = "", slack_api: str = "",
                 extra: str = "") -> Path:
    """A TOML config with one webhook endpoint ``hooks`` and one Slack app ``acme``."""
    lines = [
        "[channels.webhooks.hooks]",
        f'secrets = ["{WEBHOOK_SECRET}"]',
        f'reply_url = "{reply_url}"' if reply_url else "",
        f'reply_secret = "{REPLY_SECRET}"',
        '[channels.policy."webhook:hooks"]',
        'dm_policy = "allow"',
        'mentions = ["@palyra"]',
    ]
    if slack_api:
        lines += [
            "[channels.slack.acme]",
            f'signing_secret = "{SLACK_SECRET}"',
            f'bot_token = "{SLACK_TOKEN}"',
            f'api_base_url = "{slack_api}"',
            'bot_user_id = "UBOT"',
            "rate_per_s = 50.0",
            '[channels.policy."slack:acme"]',
            'dm_policy = "allow"',
        ]
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


def delivery(text: str, *, sender: str = "alice", conversation: str = "room-1",
             message_id: str = "", dm: bool = False, **data: Any) -> bytes:
    """A ``message.created`` Standard Webhooks body."""
    return json.dumps({"type": "message.created", "timestamp": "2026-11-25T00:00:00Z",
                       "data": {"text": text, "sender": sender, "conversation_id": conversation,
                                "message_id": message_id, "is_direct_message": dm,
                                **data}}).encode()


def journal_head(base: str, token: str) -> int:
    head = httpx.get(f"{base}/v1/journal/head", headers=admin_headers(token))
    assert head.status_code == 200, head.text
    return int(head.json().get("eventCount", 0))
