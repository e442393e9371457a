"""SIGKILL at random moments while deliveries, redeliveries and replies are in flight.

Each cycle starts ``palyra serve``, sends new Standard Webhooks, Slack and Telegram
events (signed, or built, by their own libraries) and Discord messages on a local Gateway and redeliveries of earlier ones from several
threads, and kills the daemon after a random delay. Deliveries that got no
answer are redelivered in the next cycle, as the platforms do. After the last
cycle every event must have been answered exactly once: 0 acknowledged
messages lost, 0 duplicate replies at the fake receivers (Slack: the same reply
posted twice; webhooks: the same reply under two webhook-ids). Telegram's Bot API
cannot be reconciled, so there a reply cut off by a kill may be sent once more.

It runs on both journal backends: on LMDB in the data dir, and on a real
PostgreSQL server (``[journal] backend = "postgres"``), where admission, dedupe
keys and the outbox live in the database. The PostgreSQL run kills fewer times
(``PALYRA_TEST_CHANNEL_KILLS_PG``) to stay within CI's time.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from telegram import Chat, Message, Update, User

from palyra.testing.discord import FakeDiscord
from palyra.testing.platforms import FakeSlack, WebhookReceiver, slack_headers, webhook_headers
from palyra.testing.postgres import PostgresServer
from palyra.testing.spawn import DaemonProcess, clean_env
from palyra.testing.telegram import FakeTelegram
from tests.channels.conftest import (
    REPLY_SECRET,
    SLACK_SECRET,
    SLACK_TOKEN,
    WEBHOOK_SECRET,
    delivery,
    write_config,
)

# 50 daemon starts with four adapters outlast the suite's 300 s default on a loaded box.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]
KILLS = {"lmdb": int(os.environ.get("PALYRA_TEST_CHANNEL_KILLS", "50")),
         "postgres": int(os.environ.get("PALYRA_TEST_CHANNEL_KILLS_PG", "20"))}
PER_CYCLE = 6
KINDS = ("webhook", "slack", "telegram", "discord")
TELEGRAM_TOKEN = "123456:AAE-kill-test-token"
TELEGRAM_SECRET = "kill-test-secret-token-0123456789abcdef"
TELEGRAM = f"""[channels.telegram.tg]
bot_token = "{TELEGRAM_TOKEN}"
bot_username = "palyra_bot"
webhook_secret = "{TELEGRAM_SECRET}"
rate_per_s = 200.0
[channels.policy."telegram:tg"]
dm_policy = "allow"
[channels.policy."discord:dc"]
dm_policy = "allow"
"""
DISCORD_TOKEN = "MTAwMDAw.kill-test-token"


class Event:
    def __init__(self, n: int) -> None:
        self.token = f"tok{n:05d}"
        self.kind = KINDS[n % len(KINDS)]
        self.n = n
        self.acked = False

    def request(self, base: str) -> tuple[str, bytes, dict[str, str]]:
        text = f"@palyra please echo {self.token}"
        if self.kind == "webhook":
            body = delivery(text, sender=f"s{self.token}", conversation=f"c{self.token}",
                            message_id=self.token)
            return (f"{base}/v1/ingress/webhooks/hooks", body,
                    webhook_headers(WEBHOOK_SECRET, f"msg_{self.token}", body))
        if self.kind == "telegram":
            message = Message(message_id=self.n + 1, date=datetime.datetime.now(datetime.UTC),
                              chat=Chat(id=10_000 + self.n, type="private"),
                              from_user=User(id=20_000 + self.n, first_name="U", is_bot=False),
                              text=text)
            body = json.dumps(Update(update_id=self.n + 1, message=message).to_dict()).encode()
            return (f"{base}/v1/ingress/telegram/tg", body,
                    {"x-telegram-bot-api-secret-token": TELEGRAM_SECRET,
                     "content-type": "application/json"})
        body = json.dumps({"type": "event_callback", "team_id": "T1", "event_id": self.token,
                           "event": {"type": "app_mention", "channel": f"C{self.token}",
                                     "user": f"U{self.token}", "text": text,
                                     "ts": "1.0"}}).encode()
        return f"{base}/v1/ingress/slack/acme", body, slack_headers(SLACK_SECRET, body)


_DISCORD_POSTING = threading.Lock()


def _deliver(base: str, event: Event, discord: FakeDiscord) -> None:
    if event.kind == "discord":
        # The Gateway has no redelivery: a message is sent once, and a client that
        # resumes after a crash gets what it missed replayed. One batch may hold an
        # event twice (unanswered, and drawn again), on two threads: posting it twice
        # would be two user messages, each rightly answered.
        with _DISCORD_POSTING:
            if not event.acked:
                discord.post_message(f"@palyra please echo {event.token}",
                                     channel_id=str(800_000 + event.n), author_id=str(event.n))
                event.acked = True
        return
    url, body, headers = event.request(base)
    try:
        answer = httpx.post(url, content=body, headers=headers, timeout=5)
    except httpx.HTTPError:
        return  # no answer: the platform will redeliver
    if answer.status_code == 200:
        assert answer.json()["accepted"] is True, answer.text
        event.acked = True


@pytest.mark.parametrize("backend", ["lmdb", "postgres"])
def test_kills_lose_nothing_and_duplicate_nothing(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    rng = random.Random(20261125)
    kills = KILLS[backend]
    journal = ""
    if backend == "postgres":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        journal = f'[journal]\nbackend = "postgres"\ndsn = "{server.create_database()}"\n'
    events: list[Event] = []
    with WebhookReceiver(REPLY_SECRET) as hooks, FakeSlack(SLACK_TOKEN) as slack, \
            FakeTelegram(TELEGRAM_TOKEN) as bot, FakeDiscord(DISCORD_TOKEN) as discord:
        config = write_config(tmp_path / "palyra.toml", reply_url=hooks.url + "/r",
                              slack_api=slack.api_url,
                              extra='[channels.default]\nconcurrency = 8\nmentions = ["@palyra"]\n'
                              + TELEGRAM.replace("[channels.telegram.tg]\n",
                                                 f'[channels.telegram.tg]\napi_base_url = "{bot.api_url}"\n')
                              + f'[channels.discord.dc]\nbot_token = "{DISCORD_TOKEN}"\n'
                              f'api_base_url = "{discord.api_url}"\n'
                              f'gateway_url = "{discord.gateway_url}"\n' + journal)
        daemon = DaemonProcess(tmp_path / "data", env=clean_env(),
                               extra_args=("--config", str(config)))
        # Discord delivers to a session: a first start opens one (and commits it), so every
        # later start resumes it and gets what was sent while the daemon was down.
        daemon.start()
        deadline = time.monotonic() + 20
        while not discord.connected() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        daemon.stop()
        with ThreadPoolExecutor(8) as pool:
            for _cycle in range(kills):
                daemon.start()
                base = f"http://127.0.0.1:{daemon.http_port}"
                fresh = [Event(len(events) + i) for i in range(PER_CYCLE)]
                events += fresh
                unanswered = [e for e in events if not e.acked]
                again = rng.sample(events, min(4, len(events)))  # redeliveries of any event
                batch = unanswered + again
                rng.shuffle(batch)
                futures = [pool.submit(_deliver, base, e, discord) for e in batch]
                killer = threading.Timer(rng.uniform(0.05, 0.8), daemon.kill)
                killer.start()
                for f in futures:
                    f.result()
                killer.join()
                if daemon.proc is not None and daemon.proc.poll() is None:
                    daemon.kill()
            daemon.start()  # the last start: everything unanswered is redelivered until acked
            base = f"http://127.0.0.1:{daemon.http_port}"
            for _ in range(20):
                pending = [e for e in events if not e.acked]
                if not pending:
                    break
                list(pool.map(lambda e: _deliver(base, e, discord), pending))
            assert all(e.acked for e in events)

            def answered() -> set[str]:
                texts = ([r["text"] for r in hooks.replies()] + [m["text"] for m in slack.replies()]
                         + [m["text"] for m in bot.replies()]
                         + [m["content"] for m in discord.replies()])
                return {e.token for e in events if any(e.token in t for t in texts)}

            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and len(answered()) < len(events):
                time.sleep(0.2)
            daemon.stop()
        missing = [e.token for e in events if e.token not in answered()]
        assert not missing, f"{len(missing)} acknowledged messages never answered: {missing[:5]}"
        texts = ([r["text"] for r in hooks.replies()] + [m["text"] for m in slack.replies()]
                 + [m["content"] for m in discord.replies()])
        twice = [e.token for e in events if sum(e.token in t for t in texts) > 1]
        assert not twice, (f"duplicate replies for {twice[:5]}", [
            m for m in discord.replies() if any(t in m["content"] for t in twice[:2])])
        # Telegram has no idempotency key and no read-back for bots: a reply whose send a
        # kill (or a timeout) cut off is sent again. A kill cuts at most the sends in
        # flight, one per send worker (4).
        sent = [m["text"] for m in bot.replies()]
        tg_twice = [e.token for e in events if sum(e.token in t for t in sent) > 1]
        extra = sum(max(0, sum(e.token in t for t in sent) - 1) for e in events)
        assert extra <= 4 * kills, extra
        assert hooks.duplicate_replies() == 0 and slack.duplicate_replies() == 0
        assert discord.duplicate_replies() == 0
        assert hooks.rejected == 0
        print(f"\nchannel kill test ({backend}): {kills} kills, {len(events)} events, "
              f"{len(bot.replies())} Telegram sends ({extra} resends for {len(tg_twice)} "
              "replies, after a cut), "
              f"{len(discord.replies())} Discord messages ({discord.resumes} resumes, "
              f"{discord.identifies} identify), "
              f"{len(hooks.raw)} webhook deliveries for {len(hooks.replies())} replies, "
              f"{slack.posts} Slack posts for {len(slack.replies())} replies, "
              f"{hooks.broken + slack.broken} requests cut off by a kill")
