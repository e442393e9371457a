"""The outsider's verifier (written from docs/journal/format.md alone) against the journal's own.

Journals are built through the public API only (real LMDB), then checked by both
`verifier.py` and `palyra.journal.verify_store` / `verify_bundle`: both must pass intact
data and both must fail tampered copies at the same first bad position. If the doc stops
describing the bytes exactly, these tests fail.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from palyra.journal import (
    JournalConfig,
    JournalStore,
    export_bundle,
    prune_older_than,
    verify_bundle,
    verify_store,
)

from . import verifier as V
from .journals import (
    FIXED_OPS,
    FIXTURES,
    A,
    Checkpoint,
    Prune,
    Stored,
    assert_agree_bad,
    assert_agree_ok,
    body_offset,
    build_and_export,
    check_bundle,
    check_dir,
    checkpoint_entries,
    copy_dir,
    data_dir_key,
    drafts,
    edit_db,
    flip,
    multi_event,
    of_format,
    records,
    rewrite,
    tampered,
)

# -- intact data ----------------------------------------------------------------------------

def test_fixed_journal_verifies_the_same_both_ways(fixed: Path) -> None:
    rs = records(fixed / "data")
    assert {r.fmt for r in rs} == {2, 3}, "the fixture should hold records and tombstones"
    assert any(struct.unpack(">I", r.value[130:134])[0] > 1 for r in rs if r.fmt == 2)
    check_dir(fixed / "data", ok=True)
    bundles = sorted(fixed.glob("*.ndjson"))
    assert len(bundles) == 5
    lines = [json.loads(ln) for ln in (fixed / "full.ndjson").read_bytes().splitlines()]
    redacted = [ln for ln in lines if ln["type"] == "event" and ln["redactions"]]
    assert redacted and any("<redacted>" in json.dumps(ln["payload"]) for ln in redacted)
    assert {ln["type"] for ln in lines} >= {"event", "pruned", "checkpoint", "seal"}
    for b in bundles:
        check_bundle(b, ok=True)


def test_format1_fixture_and_its_bundles(v1_dir: Path, tmp_path: Path) -> None:
    check_dir(v1_dir, ok=True)
    for name in ("full-v1.ndjson", "s1-v1.ndjson"):
        check_bundle(FIXTURES / name, ok=True)
    # New appends go on behind format 1 records, in format 2; prune and export it.
    d = copy_dir(v1_dir, tmp_path / "v1")

    async def go() -> None:
        store = JournalStore.open(d, config=JournalConfig(sync=True))
        try:
            await store.append(drafts(A("s0", "r0", True, 3, 0, False), 2_000_000_000_000))
            await store.append(drafts(A("s9", "", False, 2, 1, False), 2_000_000_000_001))
            await store.checkpoint()
            export_bundle(store, tmp_path / "mixed.ndjson")
            export_bundle(store, tmp_path / "mixed-s0.ndjson", session_id="s0")
            await prune_older_than(store, 1, now_ms=1_800_000_000_000)
            await store.checkpoint()
            export_bundle(store, tmp_path / "pruned.ndjson")
            export_bundle(store, tmp_path / "pruned-s1.ndjson", session_id="s1")
        finally:
            store.close()

    asyncio.run(go())
    assert {r.fmt for r in records(d)} == {2, 3}
    check_dir(d, ok=True)
    for name in ("mixed.ndjson", "mixed-s0.ndjson", "pruned.ndjson", "pruned-s1.ndjson"):
        check_bundle(tmp_path / name, ok=True)


# -- tampered live data dirs ----------------------------------------------------------------
RECORD_TAMPERS: dict[str, Callable[[Stored], bytes]] = {
    "payload (last byte)": lambda r: flip(r.value, len(r.value) - 1),
    "event id in the body": lambda r: flip(r.value, body_offset(r) + 3),
    "session id": lambda r: flip(r.value, 138),
    "first": lambda r: flip(r.value, 129),
    "count": lambda r: flip(r.value, 133),
    "record hash": lambda r: flip(r.value, 5),
    "global hash": lambda r: flip(r.value, 40),
    "prev hash": lambda r: flip(r.value, 100),
    "record tag": lambda r: flip(r.value, 70),
    "format tag": lambda r: flip(r.value, 0, 0x04),
    "truncated": lambda r: r.value[:-1],
}


@pytest.mark.parametrize("what", sorted(RECORD_TAMPERS))
@pytest.mark.parametrize("index", [0, -1])
def test_tampered_format2_record(fixed: Path, tmp_path: Path, what: str, index: int) -> None:
    d, _ = tampered(fixed / "data", tmp_path / "t", of_format(2, index), RECORD_TAMPERS[what])
    check_dir(d, ok=False)


def test_tampered_multi_event_record_reports_its_first_position(fixed: Path,
                                                                tmp_path: Path) -> None:
    d, rec = tampered(fixed / "data", tmp_path / "t", multi_event,
                      lambda r: flip(r.value, len(r.value) - 1))
    assert V.verify_data_dir(d).position == rec.first
    check_dir(d, ok=False)


TOMBSTONE_TAMPERS: dict[str, tuple[Callable[[Stored], bytes], bool]] = {
    "record hash": (lambda r: flip(r.value, 1), False),
    "global hash": (lambda r: flip(r.value, 64), False),
    "prev hash": (lambda r: flip(r.value, 70), False),
    "first": (lambda r: flip(r.value, 104), False),
    "count": (lambda r: flip(r.value, 108), False),
    "session id": (lambda r: flip(r.value, 122), False),
    "truncated": (lambda r: r.value[:-1], False),
    "extra byte": (lambda r: r.value + b"x", False),
    "count zero": (lambda r: r.value[:105] + bytes(4) + r.value[109:], False),
    "session length": (lambda r: flip(r.value, 119, 0x10), False),
    # Not hashed, per the doc: nothing can tell.
    "pruned_at_ms": (lambda r: flip(r.value, 117), True),
    "source format": (lambda r: flip(r.value, 109, 0x04), True),
}


@pytest.mark.parametrize("what", sorted(TOMBSTONE_TAMPERS))
@pytest.mark.parametrize("index", [0, -1])
def test_tampered_tombstone(fixed: Path, tmp_path: Path, what: str, index: int) -> None:
    change, still_ok = TOMBSTONE_TAMPERS[what]
    d, _ = tampered(fixed / "data", tmp_path / "t", of_format(3, index), change)
    check_dir(d, ok=still_ok)


def test_record_hidden_as_tombstone(fixed: Path, tmp_path: Path) -> None:
    """A record rewritten as a tombstone (hashes kept, so both chains hold) is found."""
    def bury(r: Stored) -> bytes:
        v = r.value
        session = v[134:body_offset(r)]
        return (b"\x03" + v[1:65] + v[90:122] + v[122:134] + b"\x02"
                + struct.pack(">q", 1) + session)

    d, _ = tampered(fixed / "data", tmp_path / "t", of_format(2, 0), bury)
    check_dir(d, ok=False)


def test_record_hidden_as_tombstone_without_any_prune(tmp_path: Path) -> None:
    """No journal.pruned event at all: a tombstone is then a claim nothing backs."""
    asyncio.run(build_and_export(tmp_path, FIXED_OPS[:4], []))
    d = tmp_path / "data"
    rec = records(d)[0]
    v = rec.value
    end = 138 + struct.unpack(">I", v[134:138])[0]
    rewrite(d, rec, b"\x03" + v[1:65] + v[90:134] + b"\x02" + struct.pack(">q", 1)
            + v[134:end])
    check_dir(d, ok=False)


@pytest.mark.parametrize("index", [0, 3, -2])
def test_deleted_record(fixed: Path, tmp_path: Path, index: int) -> None:
    d = copy_dir(fixed / "data", tmp_path / "t")
    rec = records(d)[index]
    edit_db(d, b"_events", lambda txn, db: txn.delete(rec.key, db=db))
    check_dir(d, ok=False)


def test_deleted_newest_record_only_the_indexes_tell(fixed: Path, tmp_path: Path) -> None:
    """The doc: without a checkpoint beyond it, cutting the newest record leaves a valid
    chain; the indexes still hold its event ids, and the transparency log's tree its
    entry (verify_store reports that)."""
    d = copy_dir(fixed / "data", tmp_path / "t")
    rec = records(d)[-1]
    edit_db(d, b"_events", lambda txn, db: txn.delete(rec.key, db=db))
    problem = verify_store(d).problem
    assert problem is not None and "transparency log" in problem.reason
    mine = V.verify_data_dir(d)
    assert not mine.ok and mine.reason.startswith("index: _event_ids"), mine


@pytest.mark.parametrize(("i", "j"), [(0, 1), (2, 5), (-3, -1)])
def test_swapped_records(fixed: Path, tmp_path: Path, i: int, j: int) -> None:
    d = copy_dir(fixed / "data", tmp_path / "t")
    rs = records(d)
    a, b = rs[i], rs[j]

    def swap(txn: Any, db: Any) -> None:
        txn.put(a.key, b.value, db=db)
        txn.put(b.key, a.value, db=db)

    edit_db(d, b"_events", swap)
    check_dir(d, ok=False)


@pytest.mark.parametrize("index", [0, 1, -1])
@pytest.mark.parametrize("field", ["signature", "head"])
def test_corrupted_checkpoint(fixed: Path, tmp_path: Path, index: int, field: str) -> None:
    d = copy_dir(fixed / "data", tmp_path / "t")
    key, value = checkpoint_entries(d)[index]
    at = value.index(field.encode()) + len(field) + 1  # the bin header after the field name
    edit_db(d, b"_checkpoints", lambda txn, db: txn.put(key, flip(value, at + 4), db=db))
    check_dir(d, ok=False)


def test_checkpoint_beyond_the_chain(fixed: Path, tmp_path: Path) -> None:
    """Cutting the newest record leaves the last checkpoint beyond the chain."""
    d = copy_dir(fixed / "data", tmp_path / "t")
    cps = checkpoint_entries(d)
    last_cp = struct.unpack(">Q", cps[-1][0][:8])[0]
    tail = [r for r in records(d) if struct.unpack(">Q", r.key)[0] >= last_cp]

    def cut(txn: Any, db: Any) -> None:
        for r in tail:
            txn.delete(r.key, db=db)

    edit_db(d, b"_events", cut)
    check_dir(d, ok=False)


def test_format1_tampers(v1_dir: Path, tmp_path: Path) -> None:
    rs = records(v1_dir)
    assert {r.fmt for r in rs} == {0xDE}
    for n, (index, needle) in enumerate([(0, b"run_engine"), (4, b"tape_seq"), (-1, b"hash")]):
        d = copy_dir(v1_dir, tmp_path / f"t{n}")
        rec = records(d)[index]
        at = rec.value.index(needle) + len(needle) + 2
        rewrite(d, rec, flip(rec.value, at))
        check_dir(d, ok=False)


# -- trusted keys -------------------------------------------------------------------------
def test_trusted_keys(fixed: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    right = (data_dir_key(fixed / "data"),)
    wrong = (Ed25519PrivateKey.generate().public_key().public_bytes_raw(),)
    # The last checkpoint of FIXED_OPS is not at the head: a key demands coverage.
    mine, theirs = (V.verify_data_dir(fixed / "data", trusted_keys=right),
                    verify_store(fixed / "data", trusted_keys=right))
    assert_agree_bad(mine, theirs)
    assert mine.reason.startswith("signed through position")
    assert_agree_bad(V.verify_data_dir(fixed / "data", trusted_keys=wrong),
                     verify_store(fixed / "data", trusted_keys=wrong))
    for b in sorted(fixed.glob("*.ndjson")):
        assert_agree_ok(V.verify_bundle_file(b, trusted_keys=right),
                        verify_bundle(b, trusted_keys=right))
        assert_agree_bad(V.verify_bundle_file(b, trusted_keys=wrong),
                         verify_bundle(b, trusted_keys=wrong))


def test_trusted_key_with_the_head_signed(tmp_path: Path) -> None:
    asyncio.run(build_and_export(tmp_path, [*FIXED_OPS, Checkpoint()], ["s2"]))
    right = (data_dir_key(tmp_path / "data"),)
    assert_agree_ok(V.verify_data_dir(tmp_path / "data", trusted_keys=right),
                    verify_store(tmp_path / "data", trusted_keys=right))


def test_format1_int_out_of_range_is_reported(v1_dir: Path, tmp_path: Path) -> None:
    d = copy_dir(v1_dir, tmp_path / "v1")
    rec = records(d)[1]
    at = rec.value.index(b"\xa5ts_ms\xcf") + 7  # the uint64's top byte
    rewrite(d, rec, flip(rec.value, at, 0x80))
    mine = V.verify_data_dir(d)
    assert mine.position == 2 and mine.reason.startswith("undecodable record"), mine
    assert_agree_bad(mine, verify_store(d))


# -- the tests can fail ---------------------------------------------------------------------

def test_an_always_ok_verifier_would_fail_these_tests(fixed: Path, tmp_path: Path) -> None:
    d, _ = tampered(fixed / "data", tmp_path / "t", of_format(2, 0),
                    lambda r: flip(r.value, len(r.value) - 1))
    always_ok = V.Report(ok=True)
    with pytest.raises(AssertionError):
        assert_agree_bad(always_ok, verify_store(d))
    wrong_position = V.verify_data_dir(d)
    assert wrong_position.position is not None
    wrong_position.position += 1
    with pytest.raises(AssertionError):
        assert_agree_bad(wrong_position, verify_store(d))




def test_tombstone_of_a_lone_record_moved_to_a_fresh_session(tmp_path: Path) -> None:
    """A tombstone's session id is covered by no hash it still holds: when its record was
    the only one of its session, renaming the session to an unused one breaks neither
    chain. Only the `_by_session` index tells, and both verifiers must say so."""
    ops = [A("s1", "r1", True, 1, 0, False), A("s2", "r2", True, 2, 1, False), Prune(),
           A("s2", "r2", True, 1, 2, False)]
    asyncio.run(build_and_export(tmp_path, ops, []))
    d = tmp_path / "data"
    tomb = next(r for r in records(d) if r.fmt == 3 and r.value.endswith(b"s1"))
    check_dir(d, ok=True)
    rewrite(d, tomb, tomb.value[:-2] + b"s9")  # same length: only the name changes
    theirs = verify_store(d)
    assert theirs.problem is not None, "the journal's verifier passed a renamed tombstone"
    assert theirs.problem.reason.startswith("index: _by_session"), theirs.problem
    check_dir(d, ok=False)
