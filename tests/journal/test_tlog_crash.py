"""Crashes in the middle of tree maintenance: after reopening, the tree matches the chain."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import lmdb
import pytest

from palyra.journal import EventDraft, JournalConfig, JournalStore, verify_store
from palyra.journal._env import TLOG, journal_dir
from palyra.journal.tlog.note import parse_checkpoint, parse_note

HELPER = Path(__file__).with_name("crash_tree.py")


def _kill_after(data_dir: Path, mode: str, delay: float) -> list[str]:
    proc = subprocess.Popen([sys.executable, str(HELPER), str(data_dir), mode], bufsize=0,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    assert first in (b"ready\n", b"opening\n"), proc.stderr.read()
    chunks: list[bytes] = []
    stdout = proc.stdout
    reader = threading.Thread(
        target=lambda: chunks.extend(iter(lambda: os.read(stdout.fileno(), 65536), b"")))
    reader.start()
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    reader.join(timeout=30)
    stdout.close()
    proc.stderr.close()
    return [line for line in b"".join(chunks).decode().split("\n")[:-1] if line]


async def _fill(data_dir: Path, records: int) -> None:
    store = JournalStore.open(data_dir, config=JournalConfig(sync=False))
    try:
        for i in range(records):
            await store.append([EventDraft("fill", "t", session_id=f"s{i % 4}", payload={"i": i})])
    finally:
        store.close()


def _drop_tree(data_dir: Path) -> None:
    env = lmdb.open(str(journal_dir(data_dir)), max_dbs=32)
    with env.begin(write=True) as txn:
        txn.drop(env.open_db(TLOG.encode(), txn=txn, create=False), delete=False)
    env.close()


@pytest.mark.slow
def test_a_kill_while_an_older_journal_gets_its_tree(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    asyncio.run(_fill(data_dir, 1500))
    _drop_tree(data_dir)
    rng = random.Random(int(os.environ.get("PALYRA_CRASH_SEED", "0")) or None)
    partial = 0
    # From early to late: on an idle machine the whole tree is done within ~0.2 s.
    for low, high in ((0.0, 0.05), (0.05, 0.3), (0.2, 0.8)):
        lines = _kill_after(data_dir, "complete", rng.uniform(low, high))
        report = verify_store(data_dir)  # read-only: a partial tree must still match its records
        assert report.ok, report.summary()
        if "opened" not in lines:
            partial += 1
    assert partial, "every run finished the tree before the kill: nothing was tested"
    with JournalStore.open(data_dir) as store:  # the next writer finishes it
        assert store.tree_size() == 1500
    assert verify_store(data_dir).ok


@pytest.mark.slow
def test_a_kill_while_appending_and_signing_leaves_a_tree_the_log_can_extend(tmp_path: Path
                                                                             ) -> None:
    data_dir = tmp_path / "data"
    rng = random.Random(int(os.environ.get("PALYRA_CRASH_SEED", "0")) or None)
    for _ in range(4):
        lines = _kill_after(data_dir, "sign", rng.uniform(0.3, 1.2))
        signed = [int(line.split()[1]) for line in lines if line.startswith("signed ")]
        report = verify_store(data_dir)  # the tree matches the chain, the stored checkpoint too
        assert report.ok, report.summary()

        async def sign_again() -> int:
            with JournalStore.open(data_dir) as store:
                note = await store.sign_tree()  # must extend whatever was signed before the kill
                return parse_checkpoint(parse_note(note).body).size

        size = asyncio.run(sign_again())
        assert not signed or size >= signed[-1]
