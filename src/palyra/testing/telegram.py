"""A local Telegram Bot API (``/bot<token>/<method>``) for tests and benchmarks.

Serves the methods palyra calls: ``setWebhook`` / ``deleteWebhook`` (kept, and
``getUpdates`` refuses with 409 while a webhook is set, as Telegram does),
``getUpdates`` (long polling with Telegram's offset rule: asking for offset N
confirms and drops every update below N) and ``sendMessage`` (kept per chat;
its answer is a ``Message`` built by ``python-telegram-bot``, the oracle for
the shape). Updates to serve are pushed as ``Update`` dicts, typically
``telegram.Update(...).to_dict()``.
"""

from __future__ import annotations

import datetime
import itertools
import json
import random
import threading
import time
from collections import Counter
from typing import Any
from urllib.parse import urlparse

from palyra.testing.platforms import _Server


class FakeTelegram(_Server):
    """The Bot API for one bot token; ``swallow`` sendMessage answers to make outcomes unknown.

    ``jitter_s``: each sendMessage is taken in after a random delay up to this long, as
    a platform takes concurrent requests in whichever order it gets to them (so chunks
    sent at once may land out of order). ``refuse``: the numbers (from 1, in arrival
    order) of sendMessage requests answered 429 without being kept.
    """

    def __init__(self, bot_token: str, *, swallow: int = 0, max_wait_s: float = 1.0,
                 jitter_s: float = 0.0, refuse: frozenset[int] = frozenset()) -> None:
        super().__init__()
        self.jitter_s = jitter_s
        self.refuse = refuse
        self._requests = itertools.count(1)
        self._random = random.Random(7)
        self.bot_token = bot_token
        self.bot_id = int(bot_token.partition(":")[0])
        self.swallow = swallow
        self.max_wait_s = max_wait_s  # a long poll never waits longer here (tests stay quick)
        self.webhook: dict[str, Any] = {}
        self.sent: list[dict[str, Any]] = []  # every sendMessage body, in order
        self.confirmed = 0  # the highest offset a getUpdates asked for
        self.offsets: list[int] = []  # the offset of every getUpdates, in order
        self.polls = 0
        self.pollers: list[tuple[str, float]] = []  # who asked each getUpdates, and when
        self._pending: list[dict[str, Any]] = []
        self._ids = itertools.count(1000)
        self._arrived = threading.Condition(self.lock)

    @property
    def api_url(self) -> str:
        return self.url

    def push(self, update: dict[str, Any]) -> None:
        """Queue an update for ``getUpdates``."""
        with self._arrived:
            self._pending.append(update)
            self._arrived.notify_all()

    def pending(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self._pending)

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes
               ) -> tuple[int, Any]:
        prefix, _, name = urlparse(path).path.rpartition("/")
        # ``/<via>/bot<token>/<method>``: a client whose base URL names it (``via``), so a
        # test with several daemons sees which one polled.
        via, _, bot = prefix.rpartition("/")
        if bot != f"bot{self.bot_token}":
            return 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
        data = json.loads(body or b"{}")
        if name == "setWebhook":
            with self.lock:
                self.webhook = data
            return 200, {"ok": True, "result": True, "description": "Webhook was set"}
        if name == "deleteWebhook":
            with self.lock:
                self.webhook = {}
            return 200, {"ok": True, "result": True}
        if name == "getUpdates":
            return self._get_updates(data, via.strip("/"))
        if name == "sendMessage":
            return self._send(data)
        return 404, {"ok": False, "error_code": 404, "description": "Not Found"}

    def _get_updates(self, data: dict[str, Any], via: str) -> tuple[int, Any]:
        offset = int(data.get("offset", 0))
        wait = min(float(data.get("timeout", 0)), self.max_wait_s)
        with self._arrived:
            if self.webhook:
                return 409, {"ok": False, "error_code": 409, "description":
                             "Conflict: can't use getUpdates method while webhook is active"}
            self.polls += 1
            self.pollers.append((via, time.monotonic()))
            self.offsets.append(offset)
            self.confirmed = max(self.confirmed, offset)
            self._pending = [u for u in self._pending if u["update_id"] >= offset]
            if not self._pending and wait > 0:
                self._arrived.wait(wait)
            return 200, {"ok": True, "result": self._pending[:100]}

    def _send(self, data: dict[str, Any]) -> tuple[int, Any]:
        from telegram import Chat, Message, User

        with self.lock:
            number, pause = next(self._requests), self._random.uniform(0, self.jitter_s)
        if number in self.refuse:
            return 429, {"ok": False, "error_code": 429,
                         "description": "Too Many Requests: retry after 1",
                         "parameters": {"retry_after": 1}}
        if pause:
            time.sleep(pause)
        with self.lock:
            self.sent.append(data)
            message = Message(
                message_id=next(self._ids), date=datetime.datetime.now(datetime.UTC),
                chat=Chat(id=int(data["chat_id"]), type="private"), text=data["text"],
                from_user=User(id=self.bot_id, first_name="palyra", is_bot=True),
                message_thread_id=data.get("message_thread_id"))
            if self.swallow > 0:  # sent, but the answer never comes back
                self.swallow -= 1
                return 0, None
        return 200, {"ok": True, "result": message.to_dict()}

    def replies(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.sent)

    def duplicate_replies(self) -> int:
        """The same text sent to the same chat, replying to the same message, twice."""
        seen = Counter((r["chat_id"], r["text"], json.dumps(r.get("reply_parameters")))
                       for r in self.replies())
        return sum(n - 1 for n in seen.values() if n > 1)
