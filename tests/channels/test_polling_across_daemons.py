"""Telegram long polling with two daemons on one PostgreSQL journal.

The poller is a singleton: only the daemon holding its lease asks ``getUpdates``
(before, every daemon polled the bot, each admission deduped by update id). When
that daemon is SIGKILLed, the other takes the lease over within twice its TTL and
polls from the offset the first one committed: nothing is lost, nothing admitted
twice.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from palyra.testing.postgres import PostgresServer
from palyra.testing.spawn import DaemonProcess, clean_env
from palyra.testing.telegram import FakeTelegram
from tests.channels.conftest import admin_headers
from tests.channels.test_telegram_e2e import TOKEN, _config, _wait, update

pytestmark = pytest.mark.slow
TTL_S = 2.0


def _daemon(tmp_path: Path, tag: str, bot: FakeTelegram, dsn: str) -> DaemonProcess:
    """A daemon polling ``bot`` through ``/<tag>/`` (so the bot sees who polled)."""
    config = _config(tmp_path / f"{tag}.toml", f"{bot.api_url}/{tag}", mode="polling")
    with config.open("a") as out:
        out.write(f'[journal]\nbackend = "postgres"\ndsn = "{dsn}"\nlease_ttl_s = {TTL_S}\n')
    return DaemonProcess(tmp_path / f"data-{tag}", env=clean_env(),
                         extra_args=("--config", str(config)))


def _answered(bot: FakeTelegram, tokens: list[str]) -> bool:
    return all(any(t in r["text"] for r in bot.replies()) for t in tokens)


def test_one_daemon_polls_and_another_takes_over_when_it_dies(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = postgres_server.create_database()
    tokens = [f"tok{i:03d}" for i in range(1, 21)]
    with FakeTelegram(TOKEN) as bot:
        a, b = _daemon(tmp_path, "a", bot, dsn), _daemon(tmp_path, "b", bot, dsn)
        for i, token in enumerate(tokens[:10], start=1):
            bot.push(update(i, f"please echo {token}"))
        a.start()
        try:
            _wait(lambda: _answered(bot, tokens[:10]), timeout=60)
            b.start()
            since = time.monotonic()
            time.sleep(3 * TTL_S)  # B lives beside A through several of its lease rounds
            assert {via for via, at in bot.pollers if at >= since} == {"a"}
        finally:
            a.kill()
        killed = time.monotonic()
        try:
            for i, token in enumerate(tokens[10:], start=11):
                bot.push(update(i, f"please echo {token}"))
            _wait(lambda: any(via == "b" for via, _at in bot.pollers), timeout=30)
            takeover = next(at for via, at in bot.pollers if via == "b") - killed
            _wait(lambda: _answered(bot, tokens), timeout=60)
            listed = httpx.get(f"http://127.0.0.1:{b.http_port}/v1/tasks",
                               headers=admin_headers(b.token), params={"limit": 1000})
            listed.raise_for_status()
            kinds = [t["kind"] for t in listed.json()["tasks"]]
        finally:
            b.stop()
    print(f"\npoller takeover after a SIGKILL: {takeover:.2f} s (TTL {TTL_S} s)")
    assert takeover <= 2 * TTL_S + 0.5, takeover  # the target, with one poll's slack
    assert kinds.count("channel.dispatch") == len(tokens), kinds  # each admitted once
    assert not any(via == "b" for via, at in bot.pollers if at < killed)
    counts = {t: sum(t in r["text"] for r in bot.replies()) for t in tokens}
    # Nothing was in flight when A was killed (its ten replies had been sent).
    assert all(n == 1 for n in counts.values()), counts
