"""``palyra journal verify`` and ``export`` on a daemon whose journal is in PostgreSQL.

The CLI is given only the data dir, as for LMDB: the daemon's data dir names
its database (``journal/postgres.json``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from palyra.testing.postgres import PostgresServer
from palyra.testing.spawn import DaemonProcess

pytestmark = pytest.mark.slow

TEXT = ("Start from 0 and add 1 to the running total 2 times, one add tool call per step, "
        "then reply with the final result.")


@pytest.fixture(scope="module")
def daemon(
    tmp_path_factory: pytest.TempPathFactory, postgres_server: PostgresServer
) -> Iterator[DaemonProcess]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}
    env.update({"PALYRA_JOURNAL_BACKEND": "postgres",
                "PALYRA_JOURNAL_DSN": postgres_server.create_database()})
    with DaemonProcess(tmp_path_factory.mktemp("cli-pg") / "data", env=env) as proc:
        yield proc


def palyra(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALYRA_")}
    return subprocess.run([sys.executable, "-m", "palyra.cli.main", *args], capture_output=True,
                          text=True, env=env, timeout=120, check=False)


def test_verify_and_export_read_the_postgres_journal(daemon: DaemonProcess, tmp_path: Path) -> None:
    chat = palyra("chat", "-m", TEXT, "--data-dir", str(daemon.data_dir))
    assert chat.returncode == 0 and "result=2" in chat.stdout, chat.stderr
    assert palyra("journal", "checkpoint", "--data-dir", str(daemon.data_dir)).returncode == 0
    verified = palyra("journal", "verify", "--data-dir", str(daemon.data_dir))
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith("OK") and "checkpoints=1" in verified.stdout
    events = int(verified.stdout.split("events=")[1].split()[0])
    assert events > 5
    assert not (daemon.data_dir / "journal" / "data.mdb").exists()  # nothing went to LMDB
    out = tmp_path / "bundle.ndjson"
    exported = palyra("journal", "export", "--out", str(out), "--data-dir", str(daemon.data_dir))
    assert exported.returncode == 0, exported.stderr
    assert f"events={events}" in exported.stdout
    bundle = palyra("journal", "verify", "--bundle", str(out))
    assert bundle.returncode == 0 and bundle.stdout.startswith("OK"), bundle.stdout


def test_verify_reports_a_row_changed_in_the_database(daemon: DaemonProcess) -> None:
    dsn = (daemon.data_dir / "journal" / "postgres.json").read_text()
    dsn = dsn.split('"dsn": "')[1].split('"')[0]
    chat = palyra("chat", "-m", TEXT, "--data-dir", str(daemon.data_dir))
    assert chat.returncode == 0, chat.stderr
    with psycopg.connect(dsn) as conn:  # flip one byte of a stored record's body
        key, value = conn.execute(
            "SELECT key, value FROM journal_kv WHERE db = '_events' ORDER BY key LIMIT 1 OFFSET 2"
        ).fetchone()  # type: ignore[misc]
        changed = bytes(value[:-1]) + bytes([value[-1] ^ 1])
        conn.execute("UPDATE journal_kv SET value = %s WHERE db = '_events' AND key = %s",
                     (changed, key))
    try:
        verified = palyra("journal", "verify", "--data-dir", str(daemon.data_dir))
        assert verified.returncode != 0 and not verified.stdout.startswith("OK"), verified.stdout
    finally:
        with psycopg.connect(dsn) as conn:
            conn.execute("UPDATE journal_kv SET value = %s WHERE db = '_events' AND key = %s",
                         (value, key))
