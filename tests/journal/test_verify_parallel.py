"""The parallel verify (``verify.parallel``) reports what the serial walk reports.

Segments are made tiny here (8 records, against 4,096 in production) so that a
journal of a few hundred records has dozens of seams and tree blocks, and the
tree's tile nodes (every 256 entries) are joined in the parent. Faults are
planted at random records, biased to the records either side of a seam.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from palyra.core.chain import LINK_TAG
from palyra.journal import JournalConfig, JournalStore, VerifyReport, verify_store
from palyra.journal._env import EVENTS, TLOG, journal_dir
from palyra.journal.format.record import (
    FIRST_AT,
    GLOBAL_AT,
    HASH_AT,
    HASHED_AT,
    PREV_AT,
    SESSION_AT,
)
from palyra.journal.read.tlog import JOURNAL_TREE
from palyra.journal.tlog.merkle import node_key, tree_prefix
from palyra.journal.verify import parallel, storewalk

from .helpers import draft

SEGMENT = 8
RECORDS = 300  # past 256: a level-8 tile node is joined by the parent


@pytest.fixture
def small_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storewalk, "CHUNK", SEGMENT)
    monkeypatch.setattr(parallel, "CHUNK", SEGMENT)
    monkeypatch.setattr(parallel, "MIN_SEGMENTS", 1)
    monkeypatch.setattr(parallel, "_MIN_BYTES", 0)
    # The test process keeps threads of other tests (a writer, a watcher), where the
    # CLI has none: a worker here only opens LMDB and reads, so it may fork beside them
    # (else every walk here would quietly run serial).
    monkeypatch.setattr(parallel, "_alone", lambda: True)


async def _build(data_dir: Path) -> None:
    async with JournalStore.open(data_dir, config=JournalConfig(sync=False)) as store:
        for i in range(RECORDS):
            # One record per append; sessions interleave so seams cut every session's chain.
            await store.append([draft(i, session_id=f"s{i % 5}", run_id=f"r{i % 3}",
                                      tape=True)])  # fmt: skip
            if i + 1 in (7, 8, 100, 161, 240):  # on, beside and inside seams
                await store.checkpoint()


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("pristine")
    asyncio.run(_build(data_dir))
    return data_dir


@pytest.fixture
def copies(tmp_path: Path, pristine: Path) -> Iterator[Any]:
    made = iter(range(1 << 30))

    def copy() -> Path:
        target = tmp_path / f"copy{next(made)}"
        shutil.copytree(pristine, target)
        return target

    yield copy


def _outcome(report: VerifyReport) -> tuple[Any, ...]:
    problem = report.problem
    return (report.summary(), report.events, report.links, report.checkpoints,
            report.head_position, report.head_hash, report.signed_through, report.pruned,
            None if problem is None else (problem.position, problem.reason))  # fmt: skip


def _both(data_dir: Path) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    return _outcome(verify_store(data_dir)), _outcome(verify_store(data_dir, jobs=2))


# Records either side of a seam (0-based record indices), and anywhere.
_SEAMS = [i for k in range(SEGMENT, RECORDS, SEGMENT) for i in (k - 1, k)]
_INDEX = st.one_of(st.sampled_from(_SEAMS), st.integers(0, RECORDS - 1))
_FIELD = st.sampled_from([HASH_AT, GLOBAL_AT, PREV_AT, FIRST_AT, SESSION_AT, -1])
_FAULT = st.one_of(
    st.tuples(st.just("flip"), _INDEX, _FIELD),
    st.tuples(st.just("delete"), _INDEX, st.just(0)),
    st.tuples(st.just("swap"), _INDEX, st.just(0)),
    # Rewritten and re-chained by someone without a key: the record's hash and every
    # global hash from it on recomputed, so only a session's chain shows it.
    st.tuples(st.just("rechain"), _INDEX, st.sampled_from([PREV_AT, -1])),
    # A forged global hash with the chain after it re-linked from it: only its link breaks.
    st.tuples(st.just("relink"), _INDEX, st.just(GLOBAL_AT)),
    st.tuples(st.just("row"), _INDEX, st.integers(0, 39)),
    st.tuples(st.just("node"), st.just(0), st.integers(0, 31)),
)


def _plant(data_dir: Path, faults: list[tuple[str, int, int]]) -> None:
    env = lmdb.open(str(journal_dir(data_dir)), max_dbs=32)
    events, tlog = env.open_db(EVENTS.encode()), env.open_db(TLOG.encode())
    prefix = tree_prefix(JOURNAL_TREE)
    with env.begin(write=True) as txn:
        keys = [key for key, _ in txn.cursor(db=events)]
        for kind, index, at in faults:
            key = keys[index % len(keys)]
            value = txn.get(key, db=events)
            if kind == "flip" and value is not None:
                txn.put(key, _flip(value, at), db=events)
            elif kind == "delete":
                txn.delete(key, db=events)
            elif kind == "swap" and value is not None:  # this record and the next trade places
                other = keys[(index + 1) % len(keys)]
                moved = txn.get(other, db=events)
                if moved is not None:
                    txn.put(key, moved, db=events)
                    txn.put(other, value, db=events)
            elif kind == "rechain" and value is not None:
                _rechain(txn, events, keys[index % len(keys):], _flip(value, at))
            elif kind == "relink" and value is not None:
                _rechain(txn, events, keys[index % len(keys):], value,
                         forged=_flip(value, at)[GLOBAL_AT:HASHED_AT])
            elif kind == "row":
                row = prefix + b"\x00" + index.to_bytes(8, "big")
                if (stored := txn.get(row, db=tlog)) is not None:
                    txn.put(row, _flip(stored, at), db=tlog)
            elif kind == "node":
                node = node_key(prefix, 8, 0)
                if (stored := txn.get(node, db=tlog)) is not None:
                    txn.put(node, _flip(stored, at), db=tlog)
    env.close()


def _rechain(txn: Any, db: Any, keys: list[bytes], value: bytes,
             forged: bytes | None = None) -> None:  # fmt: skip
    """Store ``value`` under ``keys[0]`` with its hash recomputed, and re-link the chain
    (from ``forged`` as the first record's global hash, if given)."""
    value = value[:HASH_AT] + hashlib.sha256(value[HASHED_AT:]).digest() + value[GLOBAL_AT:]
    before = txn.get(keys[0], db=db)
    cursor = txn.cursor(db=db)
    head = (cursor.value()[GLOBAL_AT:HASHED_AT] if cursor.set_key(keys[0]) and cursor.prev()
            else bytes(32))  # fmt: skip
    for key in keys:
        stored = value if key == keys[0] else txn.get(key, db=db)
        if stored is None or stored[0] != 2:
            return
        head = hashlib.sha256(LINK_TAG + head + key + stored[HASH_AT:GLOBAL_AT]).digest()
        if forged is not None and key == keys[0]:
            head = forged
        txn.put(key, stored[:GLOBAL_AT] + head + stored[HASHED_AT:], db=db)
    assert before is not None


def _flip(value: bytes, at: int) -> bytes:
    at = at % len(value)
    return value[:at] + bytes((value[at] ^ 0x01,)) + value[at + 1 :]


def test_an_intact_journal_goes_parallel_and_agrees(
    copies: Any, small_segments: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    joined: list[bool] = []
    join = parallel._join

    def counting(*args: Any) -> bool:
        joined.append(join(*args))
        return joined[-1]

    monkeypatch.setattr(parallel, "_join", counting)
    data_dir = copies()
    serial, spread = _both(data_dir)
    assert serial == spread
    assert serial[0].startswith("OK events=300 ")
    assert len(joined) == RECORDS // SEGMENT and all(joined)  # no segment fell back


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(faults=st.lists(_FAULT, min_size=1, max_size=3))
@example(faults=[("relink", SEGMENT * 2, GLOBAL_AT)])  # a seam's link alone is broken
@example(faults=[("relink", SEGMENT * 32, GLOBAL_AT)])  # … past the last checkpoint
@example(faults=[("rechain", SEGMENT * 3, PREV_AT)])  # a seam's session chain alone
def test_planted_faults_are_reported_as_the_serial_walk_reports_them(
    copies: Any, small_segments: None, faults: list[tuple[str, int, int]]
) -> None:
    data_dir = copies()
    _plant(data_dir, faults)
    serial, spread = _both(data_dir)
    assert spread == serial


def test_workers_leave_no_reader_slot_behind(
    copies: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Segments of 2 records: 150 of them, more than LMDB's 126 reader slots, so a
    # worker that took a slot per segment and could not free it would run out.
    monkeypatch.setattr(storewalk, "CHUNK", 2)
    monkeypatch.setattr(parallel, "CHUNK", 2)
    monkeypatch.setattr(parallel, "MIN_SEGMENTS", 1)
    monkeypatch.setattr(parallel, "_MIN_BYTES", 0)
    monkeypatch.setattr(parallel, "_alone", lambda: True)  # as in small_segments
    joined: list[bool] = []
    join = parallel._join
    monkeypatch.setattr(parallel, "_join", lambda *args: joined.append(join(*args)) or joined[-1])
    data_dir = copies()
    serial, spread = _both(data_dir)
    assert spread == serial and serial[0].startswith("OK events=300 ")
    assert len(joined) == RECORDS // 2 and all(joined)  # every segment was a worker's
    env = lmdb.open(str(journal_dir(data_dir)), readonly=True, max_dbs=1)
    try:
        assert env.readers().splitlines()[1:] == []  # no slot left after the header line
    finally:
        env.close()
