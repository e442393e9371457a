"""Crash safety: SIGKILL a busy writer at random points; every ack survives, the chain verifies."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from palyra.journal import JournalConfig, JournalStore, verify_store

from .helpers import BACKENDS, config_for, wait_for_dead_clients

WRITER = Path(__file__).with_name("crash_writer.py")


def _run_and_kill(data_dir: Path, delay: float, mode: list[str]) -> list[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), str(data_dir), *mode],
        # Unbuffered: readline must not read ahead of the raw os.read below.
        bufsize=0,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    stdout = proc.stdout
    assert stdout is not None
    first = stdout.readline()
    assert first == b"ready\n", proc.stderr.read() if proc.stderr else b""
    chunks: list[bytes] = []
    acked = threading.Event()

    def drain() -> None:  # a full pipe would stall the writer
        for chunk in iter(lambda: os.read(stdout.fileno(), 65536), b""):
            chunks.append(chunk)
            if b"\n" in chunk:
                acked.set()

    reader = threading.Thread(target=drain)
    reader.start()
    # The kill's moment counts from the first acknowledgement, not from "ready": on a
    # loaded machine a writer's first commit may take longer than the shortest delay,
    # and a kill before any acknowledgement would test nothing.
    acked.wait(timeout=30)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    reader.join(timeout=30)
    assert proc.stderr is not None
    err = proc.stderr.read()
    stdout.close()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, err
    # Only complete lines were acknowledged; a torn last line was not.
    return [line for line in b"".join(chunks).decode().split("\n")[:-1] if line]


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "mode", [["64"], ["1", "lone"]], ids=["batches", "lone"])  # lone: one appender, one event per frame
def test_acknowledged_events_survive_sigkill(
    tmp_path: Path, mode: list[str], backend: str, request: pytest.FixtureRequest
) -> None:
    data_dir = tmp_path / "data"
    config = JournalConfig()
    if backend == "postgres":  # the writer process dies; the server keeps what it committed
        config = config_for(backend, request.getfixturevalue("postgres_server"))
        mode = [*mode, "postgres", config.dsn]
    rng = random.Random(int(os.environ.get("PALYRA_CRASH_SEED", "0")) or None)
    acked: list[str] = []
    started = time.monotonic()
    for _ in range(5):
        acked_now = _run_and_kill(data_dir, rng.uniform(0.3, 1.5), mode)
        assert acked_now, "writer acknowledged nothing before the kill"
        acked += acked_now
        wait_for_dead_clients(config)
        report = verify_store(data_dir)
        assert report.ok, report.summary()
        with JournalStore.open(data_dir, config=config) as store:  # the dead writer's lock is gone
            stored: set[str] = set()
            tape: dict[str, list[int]] = {}
            after = 0
            while page := store.read_range(after, 1000):
                for event in page:
                    stored.add(event.event_id)
                    tape.setdefault(event.run_id, []).append(event.tape_seq)
                after = page[-1].position
            assert after == report.head_position == len(stored)
            missing = set(acked) - stored
            assert not missing, f"{len(missing)} acknowledged events lost"
            for run_id, seqs in tape.items():
                assert seqs == list(range(len(seqs))), run_id
                assert store.last_tape_seq(run_id) == len(seqs) - 1
    assert time.monotonic() - started < 60


def _kill_into(out: list[str], data_dir: Path, delay: float, mode: list[str]) -> None:
    out += _run_and_kill(data_dir, delay, mode)


@pytest.mark.slow
def test_writer_processes_sharing_one_database_lose_nothing_when_killed(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Three daemons' writers on one PostgreSQL journal, each SIGKILLed at its own moment."""
    config = config_for("postgres", request.getfixturevalue("postgres_server"))
    rng = random.Random(int(os.environ.get("PALYRA_CRASH_SEED", "0")) or None)
    acked: list[str] = []
    for _ in range(3):
        got: list[list[str]] = [[], [], []]
        threads = [
            threading.Thread(target=_kill_into, args=(
                got[i], tmp_path / f"d{i}", rng.uniform(0.3, 1.5), ["16", "postgres", config.dsn]))
            for i in range(3)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert all(got), "a writer acknowledged nothing before the kill"
        acked += [event_id for ids in got for event_id in ids]
        wait_for_dead_clients(config)
        with JournalStore.open(tmp_path / "reader", config=config) as store:
            report = verify_store(store)
            assert report.ok, report.summary()
            stored: set[str] = set()
            tape: dict[str, list[int]] = {}
            after = 0
            while page := store.read_range(after, 1000):
                for event in page:
                    stored.add(event.event_id)
                    tape.setdefault(event.run_id, []).append(event.tape_seq)
                after = page[-1].position
            assert after == report.head_position == len(stored)
            missing = set(acked) - stored
            assert not missing, f"{len(missing)} acknowledged events lost"
            for run_id, seqs in tape.items():  # all three wrote the same runs' tapes
                assert seqs == list(range(len(seqs))), run_id
