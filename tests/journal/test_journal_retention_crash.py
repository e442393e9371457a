"""SIGKILL during prunes: every record is whole or a tombstone, and the journal verifies."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from palyra.journal import (
    EventDraft,
    JournalConfig,
    JournalStore,
    PruneOrder,
    prune_older_than,
    verify_store,
)
from palyra.journal._env import journal_dir
from palyra.journal.write import commitlog as _commitlog
from palyra.journal.write import durable as _durable
from palyra.journal.write.commitlog import LOG_FILE

from . import test_journal_power_loss as power

NOW = 10**13

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


async def _prune_workload(store: JournalStore, recorder: Any) -> None:
    """Old-stamped appends (4 appenders) while prune batches of 1-3 records run."""
    async def appender(k: int) -> None:
        for n in range(10):
            drafts = [EventDraft("power.test", f"a{k}", session_id=f"s{k % 3}",
                                 run_id=f"r{k}-{n // 4}", tape=True, ts_ms=1000 + n,
                                 payload={"k": k, "n": n, "pad": "x" * (n * 37 % 300)})
                      for _ in range(1 + (n + k) % 3)]
            for event in await store.append(drafts):
                with recorder.lock:
                    recorder.acked.append(event.event_id)

    async def pruner() -> None:
        for n in range(12):
            result = await store.prune_batch(PruneOrder(
                before_ms=NOW, through=store.head().count - 1, max_records=1 + n % 3))
            with recorder.lock:
                recorder.acked.append(f"pruned:{result.through}")
            await asyncio.sleep(0)

    await asyncio.gather(*(appender(k) for k in range(4)), pruner())


def _check_pruned_image(root: Path, data: bytes, log: bytes, must_have: list[str],
                        label: str) -> None:
    directory = journal_dir(root)
    directory.mkdir(parents=True)
    (directory / "data.mdb").write_bytes(data)
    (directory / LOG_FILE).write_bytes(log)
    report = verify_store(root)
    assert report.ok, (label, report.summary())
    pruned = max((int(a.split(":")[1]) for a in must_have if a.startswith("pruned:")), default=0)
    ids = [a for a in must_have if not a.startswith("pruned:")]
    assert report.pruned >= pruned, (label, "an acknowledged prune was lost")
    with JournalStore.open(root, config=JournalConfig(map_size=1 << 17)) as store:
        assert store.pruned_through() == report.pruned, label
        env = store.env
        with env.read() as txn:  # every acknowledged event: readable, or pruned (id kept)
            for event_id in ids:
                raw = txn.get(event_id.encode(), db=env.dbs["_event_ids"])
                assert raw is not None, (label, "an acknowledged event was lost")
        kept = {e.event_id for e in store.read_range(report.pruned, 1000)}
        assert {i for i in ids if i not in kept} <= _pruned_ids(store, ids, report.pruned), label
        asyncio.run(store.append([EventDraft("after.recovery", "t", session_id="s0")]))
    report = verify_store(root)
    assert report.ok, (label, report.summary())


def _pruned_ids(store: JournalStore, ids: list[str], through: int) -> set[str]:
    env = store.env
    with env.read() as txn:
        return {i for i in ids
                if int.from_bytes(txn.get(i.encode(), db=env.dbs["_event_ids"]), "big") <= through}


@pytest.mark.slow
def test_power_loss_during_prune(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The power-loss model of test_journal_power_loss, with prune batches in the workload."""
    monkeypatch.setattr(_durable, "SYNC_EVERY_COMMITS", 5)
    monkeypatch.setattr(_commitlog, "LOG_SIZE", 48 * 1024)
    monkeypatch.setattr(_durable, "SYNC_EVERY_BYTES", 32 * 1024)
    rng = random.Random(int(os.environ.get("PALYRA_CRASH_SEED", "0")) or 1124)
    root = tmp_path / "live"
    store = JournalStore.open(root, config=JournalConfig(map_size=1 << 17))
    durable = store.env.durable
    assert durable is not None
    recorder = power._Recorder(journal_dir(root))
    recorder.flushed()
    durable._env = power._FlushSpy(durable._env, recorder)
    durable.hook = recorder.point
    try:
        asyncio.run(_prune_workload(store, recorder))
    finally:
        durable.hook = None
        store.close()
    assert any(a.startswith("pruned:") and a != "pruned:0" for a in recorder.acked)
    checked = 0
    previous = None
    for index, snapshot in enumerate(recorder.snapshots):
        must_have = recorder.acked[: snapshot.acked]
        for log_name, log in power._log_images(snapshot, previous, rng):
            for data_name, data in power._data_images(snapshot, rng):
                label = f"#{index} after {snapshot.label}: {log_name}, {data_name}"
                _check_pruned_image(tmp_path / f"img-{checked}", data, log, must_have, label)
                checked += 1
        previous = snapshot
    assert checked >= 6 * len(recorder.snapshots)
