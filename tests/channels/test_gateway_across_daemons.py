"""A Discord Gateway connection with two daemons on one PostgreSQL journal.

The connection is a singleton: only the daemon holding its lease connects (before,
each daemon identified a session of its own, and Discord delivered every message to
both). When that daemon is SIGKILLed, the other takes the lease over within twice its
TTL and resumes the session the first one last committed, so a message sent meanwhile
is replayed and answered once.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from palyra.testing.discord import FakeDiscord
from palyra.testing.postgres import PostgresServer
from palyra.testing.spawn import DaemonProcess, clean_env
from tests.channels.test_discord_e2e import TOKEN, _config, _to, _wait

pytestmark = pytest.mark.slow
TTL_S = 2.0


def _daemon(tmp_path: Path, tag: str, fake: FakeDiscord, dsn: str) -> DaemonProcess:
    config = _config(tmp_path / f"{tag}.toml", fake)
    with config.open("a") as out:
        out.write(f'[journal]\nbackend = "postgres"\ndsn = "{dsn}"\nlease_ttl_s = {TTL_S}\n')
    return DaemonProcess(tmp_path / f"data-{tag}", env=clean_env(),
                         extra_args=("--config", str(config)))


def test_one_daemon_holds_the_gateway_and_another_resumes_it_when_it_dies(
    tmp_path: Path, postgres_server: PostgresServer
) -> None:
    dsn = postgres_server.create_database()
    with FakeDiscord(TOKEN, heartbeat_ms=300) as fake:
        a, b = _daemon(tmp_path, "a", fake, dsn), _daemon(tmp_path, "b", fake, dsn)
        a.start()
        try:
            _wait(lambda: fake.connected() and fake.identifies == 1)
            fake.post_message("please echo first", channel_id="701")
            _wait(lambda: len(_to(fake, "701")) == 1)
            b.start()
            time.sleep(3 * TTL_S)  # B lives beside A through several of its lease rounds
            assert (fake.identifies, fake.resumes) == (1, 0)  # B never connected
        finally:
            a.kill()
        try:
            _wait(lambda: not fake.connected())
            fake.post_message("please echo while A was down", channel_id="702")
            _wait(lambda: fake.connected() and fake.resumes == 1, timeout=4 * TTL_S)
            _wait(lambda: len(_to(fake, "702")) == 1, timeout=30)
            time.sleep(0.5)
        finally:
            b.stop()
        assert fake.identifies == 1  # B resumed A's session: nothing was missed
        assert fake.duplicate_replies() == 0
        assert sum("while A was down" in m["content"] for m in fake.replies()) == 1
