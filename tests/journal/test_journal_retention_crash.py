"""SIGKILL during prunes: every record is whole or a tombstone, and the journal verifies."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from palyra.journal import JournalStore, prune_older_than, verify_store

PRUNER = Path(__file__).with_name("crash_pruner.py")


def _run_and_kill(data_dir: Path, delay: float) -> int:
    """Run the pruner for ``delay`` seconds, SIGKILL it; the last acknowledged watermark."""
    proc = subprocess.Popen([sys.executable, str(PRUNER), str(data_dir)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == b"ready\n", proc.stderr.read()
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err
    acked = [int(line.split()[1]) for line in out.decode().split("\n")[:-1]
             if line.startswith("pruned ")]
    return max(acked, default=0)


@pytest.mark.slow
async def test_sigkill_during_prune_leaves_a_verifying_journal(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    rng = random.Random(int(os.environ.get("PALYRA_CRASH_SEED", "0")) or None)
    for _ in range(4):
        acked = _run_and_kill(data_dir, rng.uniform(0.3, 1.2))
        report = verify_store(data_dir)
        assert report.ok, report.summary()
        assert report.pruned >= acked  # an acknowledged prune is durable
        async with JournalStore.open(data_dir) as store:
            assert store.pruned_through() == report.pruned
            # Appends and prunes go on after the crash.
            await prune_older_than(store, 0, now_ms=10**13, batch_records=64)
        report = verify_store(data_dir)
        assert report.ok, report.summary()
    assert report.pruned > 0
