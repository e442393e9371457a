"""Telegram through ``palyra serve`` against a local Bot API: ``palyra channels connect``
sets the webhook with a generated secret, webhook updates (built by ``python-telegram-bot``,
the oracle for their shape) are verified, admitted once and answered with ``sendMessage``
in 4,096-character chunks; long polling admits each update with its offset in the same
commit, so a SIGKILL loses nothing and answers nothing twice."""

from __future__ import annotations

import datetime
import json
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from telegram import Chat, Message, MessageEntity, Update, User

from palyra.testing.spawn import DaemonProcess, clean_env
from palyra.testing.telegram import FakeTelegram
from tests.channels.conftest import admin_headers, journal_head

pytestmark = pytest.mark.slow
TOKEN = "123456:AAE-test-token-of-the-telegram-tests"
BOT = User(id=123456, first_name="palyra", is_bot=True, username="palyra_bot")
ANN = User(id=7, first_name="Ann", is_bot=False, username="ann")


def _config(path: Path, api: str, *, mode: str = "webhook") -> Path:
    path.write_text("\n".join([
        "[channels.telegram.tg]",
        f'bot_token = "{TOKEN}"',
        'bot_username = "palyra_bot"',
        f'mode = "{mode}"',
        f'api_base_url = "{api}"',
        "poll_timeout_s = 1",
        "rate_per_s = 200.0",
        '[channels.policy."telegram:tg"]',
        'dm_policy = "allow"',
        "reply_max_bytes = 8000",
    ]) + "\n")
    return path


def update(update_id: int, text: str, *, chat: Chat | None = None, message_id: int = 0,
           sender: User = ANN, entities: tuple[MessageEntity, ...] = (),
           reply_to: Message | None = None) -> dict[str, Any]:
    """An Update as Telegram sends it, built by python-telegram-bot."""
    message = Message(
        message_id=message_id or update_id, date=datetime.datetime.now(datetime.UTC),
        chat=chat or Chat(id=ANN.id, type="private"), from_user=sender, text=text,
        entities=entities, reply_to_message=reply_to)
    return Update(update_id=update_id, message=message).to_dict()  # type: ignore[no-any-return]


def _wait(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def _settled_replies(bot: FakeTelegram, quiet_s: float = 1.0) -> list[str]:
    """The replies once none has arrived for ``quiet_s``.

    A killed daemon's last sendMessage requests may already sit in the fake's socket
    buffers: they are the killed daemon's sends, and land a moment after the kill.
    """
    seen, since = len(bot.replies()), time.monotonic()
    while time.monotonic() - since < quiet_s:
        time.sleep(0.05)
        if len(bot.replies()) != seen:
            seen, since = len(bot.replies()), time.monotonic()
    return [r["text"] for r in bot.replies()]


def test_webhook_connect_verify_dedupe_mentions_and_splitting(tmp_path: Path) -> None:
    with FakeTelegram(TOKEN) as bot:
        config = _config(tmp_path / "palyra.toml", bot.api_url)
        connect = subprocess.run(
            [sys.executable, "-m", "palyra.cli.main", "channels", "connect", "telegram", "tg",
             "--url", "https://palyra.example.org/", "--config", str(config),
             "--data-dir", str(tmp_path / "data")],
            capture_output=True, text=True, env=clean_env(), timeout=60)
        assert connect.returncode == 0, connect.stderr
        assert bot.webhook["url"] == "https://palyra.example.org/v1/ingress/telegram/tg"
        secret = bot.webhook["secret_token"]
        stored = tmp_path / "data" / "channels" / "telegram-tg.secret"
        assert stored.read_text().strip() == secret and len(secret) >= 32
        assert stat.S_IMODE(stored.stat().st_mode) == 0o600

        with DaemonProcess(tmp_path / "data", env=clean_env(),
                           extra_args=("--config", str(config))) as daemon:
            base = f"http://127.0.0.1:{daemon.http_port}"
            url = f"{base}/v1/ingress/telegram/tg"
            signed = {"x-telegram-bot-api-secret-token": secret}

            def post(body: dict[str, Any], headers: dict[str, str] = signed) -> httpx.Response:
                return httpx.post(url, content=json.dumps(body).encode(), headers=headers)

            first = post(update(1, "please echo hello from Telegram"))
            assert first.status_code == 200 and first.json()["accepted"] is True, first.text
            _wait(lambda: len(bot.replies()) == 1)
            [sent] = bot.replies()
            assert sent["chat_id"] == ANN.id and "hello from Telegram" in sent["text"]
            assert sent["reply_parameters"]["message_id"] == 1
            again = post(update(1, "please echo hello from Telegram"))
            assert again.json()["duplicate"] is True

            before = journal_head(base, daemon.token)
            for headers in ({}, {"x-telegram-bot-api-secret-token": secret[:-1] + "x"}):
                refused = post(update(2, "forged"), headers)
                assert refused.status_code == 401
                assert refused.json()["code"] == "SIGNATURE_INVALID"
            assert post({"update_id": "x"}).status_code == 400
            assert journal_head(base, daemon.token) == before

            group = Chat(id=-100500, type="supergroup", title="ops")
            chatter = post(update(3, "the build is green", chat=group))
            assert chatter.json()["reason"] == "not_mentioned"
            mention = "@palyra_bot please echo in the group"
            asked = post(update(4, mention, chat=group, entities=(
                MessageEntity(type="mention", offset=0, length=len("@palyra_bot")),)))
            assert asked.json()["reason"] == "routed", asked.text
            mine = Message(message_id=1001, date=datetime.datetime.now(datetime.UTC),
                           chat=group, from_user=BOT, text="earlier answer")
            replied = post(update(5, "please echo a reply to the bot", chat=group,
                                  reply_to=mine))
            assert replied.json()["reason"] == "routed", replied.text
            _wait(lambda: len(bot.replies()) == 3)
            in_group = [r for r in bot.replies() if r["chat_id"] == group.id]
            assert any("please echo in the group" in r["text"] and "@palyra_bot" not in r["text"]
                       for r in in_group)

            long = "please echo " + "abcdefghi " * 600  # 6,012 characters, one run
            post(update(6, long))
            _wait(lambda: len(bot.replies()) >= 5)
            chunks = [r["text"] for r in bot.replies()[3:]]
            assert all(len(c) <= 4096 for c in chunks) and len(chunks) >= 2
            time.sleep(0.5)
            assert bot.duplicate_replies() == 0


_SETTLED = ("SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED")


def _unsent(daemon: DaemonProcess) -> list[str]:
    """The ids of the daemon's channel sends that have not ended."""
    listed = httpx.get(f"http://127.0.0.1:{daemon.http_port}/v1/tasks",
                       headers=admin_headers(daemon.token), params={"limit": 1000})
    listed.raise_for_status()
    return [t["taskId"] for t in listed.json()["tasks"]
            if t["kind"] == "channel.send" and not t["state"].endswith(_SETTLED)]


def test_long_polling_commits_the_offset_with_the_messages(tmp_path: Path) -> None:
    with FakeTelegram(TOKEN) as bot:
        config = _config(tmp_path / "palyra.toml", bot.api_url, mode="polling")
        daemon = DaemonProcess(tmp_path / "data", env=clean_env(),
                               extra_args=("--config", str(config)))
        tokens = [f"poll{i:03d}" for i in range(1, 31)]
        for i, token in enumerate(tokens[:10], start=1):
            bot.push(update(i, f"please echo {token}"))
        daemon.start()
        _wait(lambda: bot.confirmed >= 3)
        daemon.kill()  # mid-batch: what was admitted is not asked for again
        sent_before_kill = _settled_replies(bot)
        for i, token in enumerate(tokens[10:], start=11):
            bot.push(update(i, f"please echo {token}"))
        bot.push({"update_id": 31, "edited_message": update(31, "x")["message"]})
        daemon.start()
        try:
            _wait(lambda: all(any(t in r["text"] for r in bot.replies()) for t in tokens),
                  timeout=60)
            _wait(lambda: bot.confirmed == 32)  # the ignored edit moved the offset too
            # A send the kill cut off is retried after its backoff: let the outbox drain,
            # so what the next start sends (nothing) is not a retry still due from here.
            _wait(lambda: not _unsent(daemon), timeout=60)
        finally:
            daemon.stop()
        texts = [r["text"] for r in bot.replies()]
        counts = {t: sum(t in x for x in texts) for t in tokens}
        assert all(counts.values()), "every update answered"
        # The Bot API has no idempotency key and no history for bots: a reply whose send
        # was cut off by the kill may be sent again, and only such a reply.
        twice = {t for t, n in counts.items() if n > 1}
        assert all(n <= 2 for n in counts.values())
        assert all(any(t in x for x in sent_before_kill) for t in twice), twice
        polled = len(bot.offsets)
        with daemon:  # each update was admitted exactly once: one dispatch task each
            listed = httpx.get(f"http://127.0.0.1:{daemon.http_port}/v1/tasks",
                               headers=admin_headers(daemon.token), params={"limit": 1000})
            kinds = [t["kind"] for t in listed.json()["tasks"]]
            assert kinds.count("channel.dispatch") == len(tokens), kinds
            _wait(lambda: len(bot.offsets) > polled)
            assert bot.offsets[polled] == 32, "a restart resumes at the stored offset"
            assert len(bot.replies()) == len(texts)


def test_long_replies_reach_each_chat_in_order_with_sends_at_once(tmp_path: Path) -> None:
    # The Bot API takes concurrent sendMessage requests in a random order, as a busy
    # platform does; replies cut into 200-byte chunks, four chats at once.
    people = [User(id=7000 + n, first_name=f"user{n}", is_bot=False) for n in range(4)]
    chats = [Chat(id=p.id, type="private") for p in people]  # a DM's chat is its sender
    words = " ".join(f"w{i:03d}" for i in range(240))  # 1,199 characters: 7 chunks
    with FakeTelegram(TOKEN, jitter_s=0.02) as bot:
        config = _config(tmp_path / "palyra.toml", bot.api_url, mode="polling")
        config.write_text(config.read_text().replace("reply_max_bytes = 8000",
                                                     "reply_max_bytes = 200"))
        for n, (person, chat) in enumerate(zip(people, chats, strict=True), start=1):
            bot.push(update(n, f"please echo {words}", chat=chat, sender=person))
        with DaemonProcess(tmp_path / "data", env=clean_env(),
                           extra_args=("--config", str(config))):
            _wait(lambda: all(sum(r["chat_id"] == c.id for r in bot.replies()) >= 7
                              for c in chats), timeout=60)
            _settled_replies(bot)
    for chat in chats:
        chunks = [r["text"] for r in bot.replies() if r["chat_id"] == chat.id]
        assert len(chunks) >= 7 and all(len(c.encode()) <= 200 for c in chunks)
        said = "".join(chunks).split()
        assert [w for w in said if w.startswith("w")] == words.split(), chunks
    assert bot.duplicate_replies() == 0
