"""An acknowledged ingest survives SIGKILL: with the local embedder, and with a remote one
whose endpoint is down (the item is journaled without a vector and found after a restart)."""

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

from palyra.journal import JournalStore, verify_store
from palyra.memory.embed import HashEmbedder
from palyra.memory.items import scan_items
from palyra.memory.service import Memory

WRITER = Path(__file__).with_name("ingest_writer.py")
ROOT = Path(__file__).resolve().parents[2]


def _run_and_kill(data_dir: Path, kind: str, delay: float) -> list[str]:
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT / "generated" / "python"), str(ROOT)])
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
    proc = subprocess.Popen([sys.executable, str(WRITER), str(data_dir), kind], bufsize=0,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    stdout = proc.stdout
    first = stdout.readline()
    assert first == b"ready\n", proc.stderr.read()
    chunks: list[bytes] = []
    reader = threading.Thread(
        target=lambda: chunks.extend(iter(lambda: os.read(stdout.fileno(), 65536), b"")))
    reader.start()
    # The kill's random instant counts from the first acknowledgement, not from "ready":
    # a loaded machine can take longer than the shortest delay to finish one ingest
    # (the remote embedder's client is imported at first use), which would test nothing.
    deadline = time.monotonic() + 60
    while b"\n" not in b"".join(chunks) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    reader.join(timeout=30)
    err = proc.stderr.read()
    stdout.close()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, err
    # Only complete lines were acknowledged; log lines are not ids.
    lines = b"".join(chunks).decode().split("\n")[:-1]
    return [line for line in lines if len(line) == 26 and line.isalnum()]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["hash", "dead-endpoint"])
def test_acknowledged_ingests_survive_sigkill(tmp_path: Path, kind: str) -> None:
    data_dir = tmp_path / "data"
    rng = random.Random()
    acked: list[str] = []
    for _ in range(3):
        acked_now = _run_and_kill(data_dir, kind, rng.uniform(0.3, 1.2))
        assert acked_now, "nothing acknowledged before the kill"
        acked += acked_now
        assert verify_store(data_dir).ok
        with JournalStore.open(data_dir) as store:
            stored = {item.memory_id for item in scan_items(store)}
            assert not set(acked) - stored, "acknowledged items lost"
            memory = Memory(store, HashEmbedder())  # re-embedded at start: nothing pending
            alice = memory.visible("user:alice", "")
            for memory_id in rng.sample(acked, min(20, len(acked))):
                text = memory.get(memory_id).text  # "fact number N of writer PID ...": unique
                assert memory.search(text, alice)[0][0].memory_id == memory_id
            assert memory.status().pending == 0
