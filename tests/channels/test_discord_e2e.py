"""Discord through ``palyra serve`` against a local Gateway and REST API that speak
Discord's protocol: identify, heartbeats, DMs and mentions answered as replies, 2,000-
character chunks within the rate-limit buckets, Reconnect resumed, and a SIGKILL resumed
from the last durable sequence, so a message sent while the daemon was down is replayed
and answered once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from palyra.testing.discord import FakeDiscord
from palyra.testing.spawn import DaemonProcess, clean_env

pytestmark = pytest.mark.slow
TOKEN = "MTAwMDAw.discord-test-token"


def _config(path: Path, fake: FakeDiscord) -> Path:
    path.write_text("\n".join([
        "[channels.discord.dc]",
        f'bot_token = "{TOKEN}"',
        f'api_base_url = "{fake.api_url}"',
        f'gateway_url = "{fake.gateway_url}"',
        '[channels.policy."discord:dc"]',
        'dm_policy = "allow"',
        "reply_max_bytes = 8000",
    ]) + "\n")
    return path


def _wait(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def _to(fake: FakeDiscord, channel: str) -> list[dict[str, Any]]:
    return [m for m in fake.replies() if m["channel_id"] == channel]


def test_gateway_replies_buckets_resume_and_kill(tmp_path: Path) -> None:
    with FakeDiscord(TOKEN, bucket_size=2, bucket_reset_s=0.5, heartbeat_ms=300) as fake:
        daemon = DaemonProcess(tmp_path / "data", env=clean_env(),
                               extra_args=("--config", str(_config(tmp_path / "p.toml", fake))))
        with daemon:
            _wait(lambda: fake.connected() and fake.identifies == 1)
            dm = fake.post_message("please echo hello from Discord", channel_id="701")
            _wait(lambda: len(_to(fake, "701")) == 1)
            [reply] = _to(fake, "701")
            assert "hello from Discord" in reply["content"]
            assert reply["message_reference"]["message_id"] == dm

            fake.post_message("the deploy is done", channel_id="702", guild_id="1")
            fake.post_message(f"<@{fake.bot_id}> please echo in the guild", channel_id="702",
                              guild_id="1", mentions_bot=True)
            fake.post_message("please echo as a reply", channel_id="703", guild_id="1",
                              reply_to_bot=True)
            _wait(lambda: len(_to(fake, "702")) == 1 and len(_to(fake, "703")) == 1)
            guild = _to(fake, "702")[0]["content"]
            assert "please echo in the guild" in guild and f"<@{fake.bot_id}>" not in guild

            fake.post_message("please echo " + "abcdefghi " * 500, channel_id="704")
            _wait(lambda: len(_to(fake, "704")) >= 3)
            assert all(len(m["content"]) <= 2000 for m in _to(fake, "704"))
            assert fake.limited == 0, "the bucket headers were honoured before any 429"
            assert fake.heartbeats >= 1

            fake.reconnect()  # op 7: the client resumes, missing nothing
            _wait(lambda: fake.resumes == 1 and fake.connected())
            fake.post_message("please echo after the reconnect", channel_id="705")
            _wait(lambda: len(_to(fake, "705")) == 1)

            daemon.kill()
            _wait(lambda: not fake.connected())
            fake.post_message("please echo while you were down", channel_id="706")
        with daemon:  # resumes the stored session: Discord replays the missed message
            _wait(lambda: len(_to(fake, "706")) == 1, timeout=30)
            assert fake.resumes == 2 and fake.identifies == 1
            time.sleep(0.5)
            assert fake.duplicate_replies() == 0
            texts = [m["content"] for m in fake.replies()]
            assert sum("while you were down" in t for t in texts) == 1
