"""bench.probe: messages counted per thread and type, CPU attributed to the right thread,
journal counters read from a real store, and the same snapshot served from another process."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from palyra_gen.palyra import v1 as pb

from bench import probe
from palyra.journal import EventDraft, JournalStore

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def counter() -> Iterator[probe.MessageCounter]:
    made = probe.MessageCounter()
    made.install()
    try:
        yield made
    finally:
        made.uninstall()


def _snapshot_of_child(code: str, env: dict[str, str], sock: str
                       ) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """Run ``code`` in a child until it prints ``ready``, take its probe snapshot, end it."""
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        snap = probe.remote_snapshot(sock)
    finally:
        child.communicate("")
    return child, snap


def test_counts_construction_parse_and_from_dict(counter: probe.MessageCounter) -> None:
    before = counter.counts()["total"]
    result = pb.ToolResult(success=True)
    pb.ToolResult.parse(bytes(result))
    pb.ToolResult.from_dict({"success": True})
    counts = counter.counts()
    assert counts["total"] - before == 3
    assert counts["by_type"]["ToolResult"] == 3


def test_counts_per_thread_without_losing_increments(counter: probe.MessageCounter) -> None:
    def build() -> None:
        for _ in range(2000):
            pb.ToolResult()

    threads = [threading.Thread(target=build, name=f"builder-{i}") for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    by_thread = counter.counts()["by_thread"]
    assert {f"builder-{i}": 2000 for i in range(4)}.items() <= by_thread.items()


def test_uninstall_stops_counting(counter: probe.MessageCounter) -> None:
    counter.uninstall()
    before = counter.counts()["total"]
    pb.ToolResult()
    assert counter.counts()["total"] == before


def test_thread_cpu_goes_to_the_thread_that_spent_it() -> None:
    spent_some = threading.Event()
    stop = threading.Event()

    def spin() -> None:
        start = time.thread_time()
        while not stop.is_set():
            if time.thread_time() - start > 0.05:
                spent_some.set()

    before, _ = probe.thread_cpu()
    thread = threading.Thread(target=spin, name="palyra-journal-spinner")
    thread.start()
    try:
        assert spent_some.wait(10)
        during, _ = probe.thread_cpu()  # must be read while the thread is alive
    finally:
        stop.set()
        thread.join()
    spent = during.get("journal:palyra-journal-spinner", 0.0) - before.get(
        "journal:palyra-journal-spinner", 0.0)
    assert spent >= 0.05, (before, during)
    assert "event_loop:MainThread" in during


def test_thread_class_buckets() -> None:
    assert probe.thread_class("MainThread", True) == "event_loop"
    assert probe.thread_class("palyra-journal-writer", False) == "journal"
    assert probe.thread_class("asyncio_0", False) == "other"


async def test_journal_counters_follow_a_real_store(tmp_path: Path) -> None:
    store = JournalStore.open(tmp_path / "journal")
    try:
        probe.register_store(store)
        before = probe.journal_counters()
        await store.append([EventDraft("tape.model_token", "run_engine", session_id="s",
                                       run_id="r", tape=True, payload={"i": i})
                            for i in range(3)])
        await store.append([EventDraft("tape.model_token", "run_engine", session_id="s",
                                       run_id="r", tape=True, payload={"i": 9})])
        after = probe.journal_counters()
    finally:
        store.close()
    assert after["commits"] - before.get("commits", 0) == 2
    assert after["appended_events"] - before.get("appended_events", 0) == 4
    # The writer may commit several frames to LMDB at once (docs/journal/design.md).
    assert 1 <= after["lmdb_txns"] - before.get("lmdb_txns", 0) <= 2
    assert probe.journal_counters().get("commits", 0) == 0  # a closed store is not counted


def test_delta_subtracts_two_snapshots() -> None:
    probe.COUNTER.install()
    try:
        before = probe.snapshot()
        for _ in range(7):
            pb.ToolResult()
        after = probe.snapshot()
    finally:
        probe.COUNTER.uninstall()
    window = probe.delta(before, after)
    assert window["messages"]["total"] == 7
    assert window["messages"]["by_thread"] == {"MainThread": 7}
    assert window["cpu_s"] > 0


def test_a_window_holds_its_longest_collection_per_generation() -> None:
    """The longest pause is the window's: a collection before the window's first
    snapshot is not in it, one inside is, in its own generation."""
    gc.collect(2)
    before = probe.snapshot()  # the full collection above stays before the window
    gc.collect(0)
    after = probe.snapshot()
    window = probe.delta(before, after)
    longest = window["gc_longest_s"]
    assert longest[0] > 0 and longest[2] == 0.0
    assert window["gc"]["n"][0] >= 1
    assert max(longest) <= sum(window["gc"]["s"])


def _site_env(sock: str) -> dict[str, str]:
    """A child's environment with ``bench/_site`` first on its path and the probe on ``sock``."""
    return {**os.environ, "PALYRA_BENCH_PROBE": sock,
            "PYTHONPATH": os.pathsep.join([str(REPO / "bench" / "_site"), str(REPO),
                                           os.environ.get("PYTHONPATH", "")])}


def test_a_process_started_with_the_site_dir_serves_snapshots(tmp_path: Path) -> None:
    sock = str(tmp_path / "probe.sock")
    env = _site_env(sock)
    code = ("import sys, time\n"
            "from palyra_gen.palyra import v1 as pb\n"
            "for _ in range(5): pb.ToolResult()\n"
            # the probe loaded betterproto2 before the program ran: as palyra would
            "assert 'pydantic' not in sys.modules\n"
            "print('ready', flush=True)\n"
            "sys.stdin.read()\n")
    child, snap = _snapshot_of_child(code, env, sock)
    assert snap["pid"] == child.pid
    assert snap["messages"]["by_type"] == {"ToolResult": 5}
    assert any(key.startswith("other:bench-probe") for key in snap["threads"])


def test_a_frozen_process_still_shows_its_journal(tmp_path: Path) -> None:
    """After ``gc.freeze()`` the store is invisible to ``gc.get_objects()``; the probe
    finds it from the stack that holds it (as ``palyra serve`` holds its app)."""
    sock = str(tmp_path / "probe.sock")
    env = _site_env(sock)
    code = ("import asyncio, gc, sys\n"
            "from palyra.journal import EventDraft, JournalStore\n"
            "def serve(path):\n"
            "    holder = {'store': JournalStore.open(path)}\n"
            "    asyncio.run(holder['store'].append([EventDraft(kind='test.note', actor='t',"
            " payload={})]))\n"
            "    gc.collect(); gc.freeze()\n"
            "    assert not any(isinstance(o, JournalStore) for o in gc.get_objects())\n"
            "    print('ready', flush=True)\n"
            "    sys.stdin.read()\n"
            "    holder['store'].close()\n"
            f"serve({str(tmp_path / 'data')!r})\n")
    child, snap = _snapshot_of_child(code, env, sock)
    assert child.returncode == 0
    assert snap["journal"].get("appended_events", 0) >= 1
    assert snap["gc"]["frozen"] > 0 and len(snap["gc"]["n"]) == 3
