"""The outsider's verifier (written from docs/journal.md alone) against the journal's own.

Journals are built through the public API only (real LMDB), then checked by both
`verifier.py` and `palyra.journal.verify_store` / `verify_bundle`: both must pass intact
data and both must fail tampered copies at the same first bad position. If the doc stops
describing the bytes exactly, these tests fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import struct
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palyra.journal import (
    EntityWrite,
    EventDraft,
    JournalConfig,
    JournalStore,
    VerifyReport,
    export_bundle,
    prune_older_than,
    verify_bundle,
    verify_store,
)

from . import verifier as V

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "journal_v1"
SECRETS = ({"password": "hunter2", "n": 1}, {"auth": "Bearer abcdefghijklmnop", "f": 1.5},
           {"args": '{"api_key": "xyz12345", "q": "ok"}', "list": [1, -40, None, True]},
           {"plain": "é✓", "big": 2**40, "neg": -(2**33)})


# -- comparing the two verifiers ------------------------------------------------------------

def theirs_position(r: VerifyReport) -> int | None:
    return None if r.problem is None else r.problem.position


def assert_agree_ok(mine: V.Report, theirs: VerifyReport) -> None:
    assert theirs.problem is None, theirs.problem
    assert mine.ok, (mine.position, mine.reason)
    assert (mine.events, mine.pruned, mine.links, mine.checkpoints) == (
        theirs.events, theirs.pruned, theirs.links, theirs.checkpoints)
    assert (mine.head_position, mine.head_hash) == (theirs.head_position, theirs.head_hash)


def assert_agree_bad(mine: V.Report, theirs: VerifyReport) -> None:
    assert theirs.problem is not None, "the journal's verifier passed tampered data"
    assert not mine.ok, f"the outsider's verifier passed tampered data ({theirs.problem})"
    assert mine.position == theirs_position(theirs), (
        f"first bad position: mine {mine.position} ({mine.reason}), "
        f"theirs {theirs.problem.position} ({theirs.problem.reason})")


def check_dir(d: Path, *, ok: bool) -> None:
    mine, theirs = V.verify_data_dir(d), verify_store(d)
    (assert_agree_ok if ok else assert_agree_bad)(mine, theirs)


def check_bundle(p: Path, *, ok: bool) -> None:
    mine, theirs = V.verify_bundle_file(p), verify_bundle(p)
    (assert_agree_ok if ok else assert_agree_bad)(mine, theirs)


# -- building journals through the public API ---------------------------------------------

@dataclass(frozen=True)
class Append:
    session: str
    run: str           # "" for none
    tape: bool
    n: int
    secret: int
    entity: bool
    extra: Any = None  # any JSON value, to exercise the canonical encoding of bundles


@dataclass(frozen=True)
class Concurrent:
    calls: tuple[Append, ...]


@dataclass(frozen=True)
class Checkpoint:
    pass


@dataclass(frozen=True)
class Prune:
    pass


Op = Append | Concurrent | Checkpoint | Prune


def drafts(a: Append, ts_ms: int) -> list[EventDraft]:
    out = []
    for i in range(a.n):
        payload = dict(SECRETS[(a.secret + i) % len(SECRETS)], i=i, x=a.extra)
        writes = (EntityWrite("sessions", a.session or "none", b"row"),) if a.entity else ()
        out.append(EventDraft(f"tape.k{i % 3}" if a.tape else "note", "user:a",
                              session_id=a.session, run_id=a.run, tape=a.tape and bool(a.run),
                              payload=payload, principal="user:a", device_id="d1",
                              channel="cli", ts_ms=ts_ms, entity_writes=writes))
    return out


async def build(d: Path, ops: list[Op], *, sync: bool = False) -> JournalStore:
    """Apply `ops`; event ts_ms grows by one per op so a prune can cut a prefix."""
    store = JournalStore.open(d, config=JournalConfig(sync=sync))
    for t, op in enumerate(ops):
        ts = 1_000 + t
        if isinstance(op, Append):
            await store.append(drafts(op, ts))
        elif isinstance(op, Concurrent):
            await asyncio.gather(*(store.append(drafts(c, ts)) for c in op.calls))
        elif isinstance(op, Checkpoint):
            await store.checkpoint()
        else:
            await prune_older_than(store, 1, now_ms=ts)
    return store


async def build_and_export(d: Path, ops: list[Op], sessions: list[str], *,
                           sync: bool = False) -> list[Path]:
    store = await build(d / "data", ops, sync=sync)
    try:
        bundles = [d / "full.ndjson"]
        export_bundle(store, bundles[0])
        for s in sessions:
            p = d / f"session-{len(bundles)}.ndjson"
            export_bundle(store, p, session_id=s)
            bundles.append(p)
    finally:
        store.close()
    return bundles


A = Append
FIXED_OPS: list[Op] = [
    Checkpoint(),
    A("s1", "r1", True, 3, 0, True),
    Concurrent((A("s1", "r1", True, 2, 1, False), A("s2", "r2", True, 2, 2, True),
                A("s1", "", False, 1, 3, False), A("", "", False, 1, 0, False))),
    A("s2", "r2", True, 1, 1, False),
    Checkpoint(),
    Concurrent((A("s1", "r1", True, 1, 2, False), A("s3", "r3", False, 2, 3, True))),
    Prune(),
    A("s1", "r1", True, 2, 0, False),
    Concurrent((A("s2", "r2", True, 3, 1, True), A("s3", "r3", True, 1, 2, False))),
    Checkpoint(),
    A("s3", "", False, 2, 3, False),
]


@pytest.fixture(scope="module")
def fixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fixed")
    asyncio.run(build_and_export(d, FIXED_OPS, ["s1", "s2", "s3", ""]))
    return d


@pytest.fixture(scope="module")
def v1_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("v1")
    with tarfile.open(FIXTURES / "journal-v1.tar.gz") as tar:
        tar.extractall(d, filter="data")
    return d


# -- tampering with a copy's LMDB directly ------------------------------------------------

@dataclass
class Stored:
    key: bytes
    value: bytes

    @property
    def fmt(self) -> int:
        return self.value[0]

    @property
    def first(self) -> int:
        if self.fmt == 2:
            return int(struct.unpack(">Q", self.value[122:130])[0])
        if self.fmt == 3:
            return int(struct.unpack(">Q", self.value[97:105])[0])
        return int(struct.unpack(">Q", self.key)[0])


def records(d: Path) -> list[Stored]:
    env = lmdb.open(str(d / "journal"), readonly=True, lock=False, max_dbs=64)
    try:
        with env.begin() as txn:
            db = env.open_db(b"_events", txn=txn, create=False)
            return [Stored(bytes(k), bytes(v)) for k, v in txn.cursor(db=db)]
    finally:
        env.close()


def copy_dir(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def edit_db(d: Path, name: bytes, edit: Callable[[Any, Any], None]) -> None:
    """Run `edit(txn, db)` in one write transaction on sub-DB `name` of data dir `d`."""
    env = lmdb.open(str(d / "journal"), max_dbs=64)
    try:
        with env.begin(write=True) as txn:
            edit(txn, env.open_db(name, txn=txn, create=False))
    finally:
        env.close()


def flip(value: bytes, offset: int, mask: int = 0x01) -> bytes:
    b = bytearray(value)
    b[offset] ^= mask
    return bytes(b)


def rewrite(d: Path, rec: Stored, value: bytes) -> None:
    edit_db(d, b"_events", lambda txn, db: txn.put(rec.key, value, db=db))


def tampered(src: Path, dst: Path, pick: Callable[[list[Stored]], Stored],
             change: Callable[[Stored], bytes]) -> tuple[Path, Stored]:
    d = copy_dir(src, dst)
    rec = pick(records(d))
    rewrite(d, rec, change(rec))
    return d, rec


def of_format(fmt: int, index: int = 0) -> Callable[[list[Stored]], Stored]:
    return lambda rs: [r for r in rs if r.fmt == fmt][index]


def multi_event(rs: list[Stored]) -> Stored:
    return next(r for r in rs if r.fmt == 2 and struct.unpack(">I", r.value[130:134])[0] > 1)


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

def body_offset(rec: Stored) -> int:
    slen: int = struct.unpack(">I", rec.value[134:138])[0]
    return 138 + slen


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
    chain (verify_store passes); the indexes still hold its event ids."""
    d = copy_dir(fixed / "data", tmp_path / "t")
    rec = records(d)[-1]
    edit_db(d, b"_events", lambda txn, db: txn.delete(rec.key, db=db))
    assert verify_store(d).problem is None
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


def checkpoint_entries(d: Path) -> list[tuple[bytes, bytes]]:
    env = lmdb.open(str(d / "journal"), readonly=True, lock=False, max_dbs=64)
    try:
        with env.begin() as txn:
            db = env.open_db(b"_checkpoints", txn=txn, create=False)
            return [(bytes(k), bytes(v)) for k, v in txn.cursor(db=db)]
    finally:
        env.close()


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

def data_dir_key(d: Path) -> bytes:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    seed = (d / "journal" / "checkpoint_ed25519.key").read_bytes()
    return Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()


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


@settings(max_examples=int(os.environ.get("OUTSIDER_EXAMPLES", "15")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pick=st.integers(0, 2**32), offset=st.integers(0, 2**32), mask=st.integers(1, 255))
def test_format1_random_flips(v1_dir: Path, pick: int, offset: int, mask: int) -> None:
    with scratch() as t:
        d = copy_dir(v1_dir, t / "v1")
        rs = records(d)
        rec = rs[pick % len(rs)]
        rewrite(d, rec, flip(rec.value, offset % len(rec.value), mask))
        mine = V.verify_data_dir(d)
        try:
            theirs = verify_store(d)
        except struct.error:  # test_format1_int_out_of_range_is_reported
            assert not mine.ok and mine.reason.startswith("undecodable record"), mine
            return
        if theirs.problem is None:
            assert mine.ok, mine  # a flip neither can see (format 1's `v`)
        else:
            assert_agree_bad(mine, theirs)


@pytest.mark.xfail(raises=struct.error, strict=True,
                   reason="verify_store raises struct.error on a format 1 record whose ts_ms "
                          "does not fit an i64, instead of reporting an undecodable record")
def test_format1_int_out_of_range_is_reported(v1_dir: Path, tmp_path: Path) -> None:
    d = copy_dir(v1_dir, tmp_path / "v1")
    rec = records(d)[1]
    at = rec.value.index(b"\xa5ts_ms\xcf") + 7  # the uint64's top byte
    rewrite(d, rec, flip(rec.value, at, 0x80))
    mine = V.verify_data_dir(d)
    assert mine.position == 2 and mine.reason.startswith("undecodable record"), mine
    assert_agree_bad(mine, verify_store(d))


# -- tampered bundles -----------------------------------------------------------------------

def edit_line(src: Path, dst: Path, pick: Callable[[dict[str, Any]], bool],
              edit: Callable[[bytes], bytes], nth: int = 0) -> Path:
    lines = src.read_bytes().split(b"\n")
    hits = [i for i, ln in enumerate(lines) if ln and pick(json.loads(ln))]
    i = hits[nth]
    lines[i] = edit(lines[i])
    dst.write_bytes(b"\n".join(lines))
    return dst


def sub(old: bytes, new: bytes) -> Callable[[bytes], bytes]:
    def go(line: bytes) -> bytes:
        assert old in line
        return line.replace(old, new, 1)
    return go


def hex_flip(key: str) -> Callable[[bytes], bytes]:
    def go(line: bytes) -> bytes:
        at = line.index(f'"{key}":"'.encode()) + len(key) + 4
        c = line[at:at + 1]
        return line[:at] + (b"1" if c != b"1" else b"2") + line[at + 1:]
    return go


def of_type(t: str) -> Callable[[dict[str, Any]], bool]:
    return lambda o: o.get("type") == t


BUNDLE_TAMPERS: dict[str, tuple[Callable[[dict[str, Any]], bool], Callable[[bytes], bytes],
                                int]] = {
    "event actor": (of_type("event"), sub(b'"actor":"user:a"', b'"actor":"user:b"'), 0),
    "last event actor": (of_type("event"), sub(b'"actor":"user:a"', b'"actor":"user:b"'), -1),
    "event payload": (of_type("event"), sub(b'"i":0', b'"i":7'), 0),
    "event tape_seq": (lambda o: o.get("type") == "event" and o["tape_seq"] >= 0,
                       lambda ln: ln.replace(b'"tape_seq":', b'"tape_seq":1', 1), 0),
    "event hash": (of_type("event"), hex_flip("hash"), 1),
    "event prev_hash": (of_type("event"), hex_flip("prev_hash"), -1),
    "event global_hash": (of_type("event"), hex_flip("global_hash"), 2),
    "event position": (of_type("event"), sub(b'"position":', b'"position":1'), 1),
    "pruned hash": (of_type("pruned"), hex_flip("hash"), 0),
    "pruned prev_hash": (of_type("pruned"), hex_flip("prev_hash"), -1),
    "pruned last": (of_type("pruned"), sub(b'"last":', b'"last":1'), 0),
    "link hash": (of_type("link"), hex_flip("hash"), 0),
    "link global_hash": (of_type("link"), hex_flip("global_hash"), -1),
    "checkpoint signature": (of_type("checkpoint"), hex_flip("signature"), 1),
    "checkpoint head": (of_type("checkpoint"), hex_flip("head_hash"), -1),
    "seal signature": (of_type("seal"), hex_flip("signature"), 0),
    "trailer sha256": (of_type("trailer"), hex_flip("sha256"), 0),
}


@pytest.mark.parametrize(("what", "bundle"), [
    (what, bundle) for what in sorted(BUNDLE_TAMPERS)
    for bundle in ("full.ndjson", "session-1.ndjson")
    if bundle != "full.ndjson" or not what.startswith("link")])  # full bundles have no links
def test_tampered_bundle(fixed: Path, tmp_path: Path, bundle: str, what: str) -> None:
    pick, edit, nth = BUNDLE_TAMPERS[what]
    src = fixed / bundle
    assert any(pick(json.loads(ln)) for ln in src.read_bytes().splitlines()), "no such line"
    check_bundle(edit_line(src, tmp_path / "b.ndjson", pick, edit, nth), ok=False)


def forge(src: Path, dst: Path, edit: Callable[[list[dict[str, Any]]], None]) -> Path:
    """Rewrite a bundle's lines as the exporter spells them, with a recomputed trailer."""
    import hashlib

    import msgspec

    objs = [json.loads(ln) for ln in src.read_bytes().splitlines()]
    edit(objs)
    body = b"".join(msgspec.json.encode(o, order="sorted") + b"\n" for o in objs[:-1])
    objs[-1]["sha256"] = hashlib.sha256(body).hexdigest()
    dst.write_bytes(body + msgspec.json.encode(objs[-1], order="sorted") + b"\n")
    return dst


@pytest.mark.xfail(raises=(struct.error, OverflowError), strict=True,
                   reason="verify_bundle raises on an event line whose ts_ms/tape_seq does "
                          "not fit an i64, instead of reporting the line")
@pytest.mark.parametrize("field", ["ts_ms", "tape_seq"])
@pytest.mark.parametrize("bundle", ["v1", "v4"])
def test_bundle_int_out_of_range_is_reported(fixed: Path, tmp_path: Path, field: str,
                                             bundle: str) -> None:
    src = FIXTURES / "full-v1.ndjson" if bundle == "v1" else fixed / "full.ndjson"

    def edit(objs: list[dict[str, Any]]) -> None:
        next(o for o in objs if o["type"] == "event")[field] = 2**63

    p = forge(src, tmp_path / "b.ndjson", edit)
    mine = V.verify_bundle_file(p)
    assert not mine.ok and mine.position is not None, mine
    assert_agree_bad(mine, verify_bundle(p))


def test_respelled_line_only_the_journal_rejects(fixed: Path, tmp_path: Path) -> None:
    """docs "Verifying": the spelling check is optional; the outsider's verifier skips it.
    A line re-spelled (same values) with a recomputed trailer passes it, not verify_bundle;
    the same spelling with the old trailer fails both."""
    import hashlib

    lines = (fixed / "full.ndjson").read_bytes().splitlines(keepends=True)
    i = next(i for i, ln in enumerate(lines) if json.loads(ln)["type"] == "event")
    lines[i] = lines[i].replace(b'"type":"event"', b'"type": "event"')
    old = tmp_path / "old.ndjson"
    old.write_bytes(b"".join(lines))
    assert not V.verify_bundle_file(old).ok and verify_bundle(old).problem is not None
    trailer = json.loads(lines[-1])
    trailer["sha256"] = hashlib.sha256(b"".join(lines[:-1])).hexdigest()
    lines[-1] = json.dumps(trailer, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    new = tmp_path / "new.ndjson"
    new.write_bytes(b"".join(lines))
    assert V.verify_bundle_file(new).ok
    theirs = verify_bundle(new).problem
    assert theirs is not None and "canonical form" in theirs.reason


@pytest.mark.parametrize("drop", ["event", "checkpoint", "pruned", "trailer", "seal"])
def test_bundle_with_a_line_removed(fixed: Path, tmp_path: Path, drop: str) -> None:
    lines = (fixed / "full.ndjson").read_bytes().splitlines(keepends=True)
    i = next(i for i, ln in enumerate(lines) if json.loads(ln)["type"] == drop)
    (tmp_path / "b.ndjson").write_bytes(b"".join(lines[:i] + lines[i + 1:]))
    check_bundle(tmp_path / "b.ndjson", ok=False)


def test_v1_bundles_tampered(tmp_path: Path) -> None:
    for name in ("full-v1.ndjson", "s1-v1.ndjson"):
        p = edit_line(FIXTURES / name, tmp_path / name, of_type("event"),
                      sub(b'"kind":"', b'"kind":"x'), 2)
        check_bundle(p, ok=False)


# -- compaction digests ---------------------------------------------------------------------

Digest = Callable[[int, int], str]


def compaction_journal(d: Path, claim: Callable[[Digest], dict[str, Any]], *,
                       prune: bool = False) -> list[Path]:
    """Run `rc` tapes seqs 0..5, then a compaction whose payload is `claim(digest)`, where
    `digest(a, b)` is computed here, from the doc, over seqs a..b as the store reads them."""
    from ._layout import canon

    async def go() -> list[Path]:
        store = JournalStore.open(d / "data", config=JournalConfig(sync=False))
        try:
            for t in range(3):
                await store.append(drafts(A("sc", "rc", True, 2, t, False), 1_000 + t))
                await store.append(drafts(A("sx", "", False, 1, t, False), 1_000 + t))
            tape = store.read_tape("rc").events

            def digest(a: int, b: int) -> str:
                return V.tape_digest((e.tape_seq, e.kind, canon(e.payload))
                                     for e in tape[a:b + 1])

            payload = claim(digest)
            if prune:
                await prune_older_than(store, 1, now_ms=1_002)
            await store.append([EventDraft("tape.session_compaction", "system:engine",
                                           session_id="sc", run_id="rc", tape=True,
                                           payload=payload, ts_ms=1_010)])
            await store.checkpoint()
            export_bundle(store, d / "full.ndjson")
            export_bundle(store, d / "sc.ndjson", session_id="sc")
        finally:
            store.close()
        return [d / "full.ndjson", d / "sc.ndjson"]

    return asyncio.run(go())


def span(first: Any, last: Any, a: int = 1, b: int = 3) -> Callable[[Digest], dict[str, Any]]:
    """A compaction payload naming `first..last` (None: left out) with the digest of a..b."""
    def claim(digest: Digest) -> dict[str, Any]:
        out = {"firstSeq": first, "lastSeq": last, "digestSha256": digest(a, b)}
        return {k: v for k, v in out.items() if v is not None}
    return claim


CLAIMS: dict[str, tuple[Callable[[Digest], dict[str, Any]], bool]] = {
    "valid": (span("1", "3"), True),
    "wrong digest": (lambda dg: {"firstSeq": "1", "lastSeq": "3", "digestSha256": "0" * 64},
                     False),
    "other range": (span("1", "2"), False),
    "reversed": (span("3", "1"), False),
    "not before it": (span("1", "6", 1, 5), False),
    "no digest": (lambda dg: {"firstSeq": "1", "lastSeq": "3"}, False),
    "not a number": (span("x", "3"), False),
    "json ints": (span(1, 3), True),
    "first omitted is 0": (span(None, "3", 0, 3), True),
    "first omitted, digest of 1..3": (span(None, "3"), False),
}


@pytest.mark.parametrize("what", sorted(CLAIMS))
def test_compaction_digest(tmp_path: Path, what: str) -> None:
    claim, ok = CLAIMS[what]
    bundles = compaction_journal(tmp_path, claim)
    check_dir(tmp_path / "data", ok=ok)
    for b in bundles:
        check_bundle(b, ok=ok)


def test_compaction_over_a_pruned_span(tmp_path: Path) -> None:
    bundles = compaction_journal(tmp_path, CLAIMS["wrong digest"][0], prune=True)
    assert {r.fmt for r in records(tmp_path / "data")} == {2, 3}
    check_dir(tmp_path / "data", ok=True)
    for b in bundles:
        check_bundle(b, ok=True)


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


# -- random journals ------------------------------------------------------------------------

SESSIONS = ["s1", "s2", "s3", ""]
RUNS = ["r1", "r2", "r3", ""]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)
appends = st.builds(Append, st.sampled_from(SESSIONS), st.sampled_from(RUNS), st.booleans(),
                    st.integers(1, 4), st.integers(0, 3), st.booleans(), json_values)
ops_strategy = st.lists(
    st.one_of(appends, st.builds(Concurrent, st.lists(appends, min_size=2, max_size=5)
                                 .map(tuple)),
              st.just(Checkpoint()), st.just(Prune())),
    min_size=1, max_size=10)


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="outsider-") as t:
        yield Path(t)


def sessions_of(ops: list[Op]) -> list[str]:
    found: set[str] = set()
    for op in ops:
        for a in (op,) if isinstance(op, Append) else getattr(op, "calls", ()):
            found.add(a.session)
    return sorted(found)


# OUTSIDER_EXAMPLES=400 for a longer hunt; 15 keeps the suite fast.
@settings(max_examples=int(os.environ.get("OUTSIDER_EXAMPLES", "15")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops_strategy, pick=st.integers(0, 2**32), offset=st.integers(0, 2**32),
       mask=st.integers(1, 255))
def test_random_journals_agree(ops: list[Op], pick: int, offset: int, mask: int) -> None:
    with scratch() as d:
        bundles = asyncio.run(build_and_export(d, ops, sessions_of(ops)))
        check_dir(d / "data", ok=True)
        for b in bundles:
            check_bundle(b, ok=True)
        # One flipped byte in a random stored checkpoint (on a copy).
        cps = checkpoint_entries(d / "data")
        if cps:
            c = copy_dir(d / "data", d / "cp")
            key, value = cps[pick % len(cps)]
            at = offset % len(value)
            edit_db(c, b"_checkpoints", lambda txn, db: txn.put(key, flip(value, at, mask), db=db))
            mine = V.verify_data_dir(c)
            theirs = verify_store(c)
            # The record's `v` and the key are not checked by either: a flip there may pass.
            if theirs.problem is None:
                assert mine.ok, mine
            else:
                assert_agree_bad(mine, theirs)
        rs = records(d / "data")
        if not rs:
            return
        rec = rs[pick % len(rs)]
        at = offset % len(rec.value)
        # A tombstone's source format (byte 109) and pruned_at_ms (110..118) are not hashed.
        still_ok = rec.fmt == 3 and 109 <= at < 118
        rewrite(d / "data", rec, flip(rec.value, at, mask))
        check_dir(d / "data", ok=still_ok)
        # One flipped byte in a random line (not the header) of one of the bundles.
        bundle = bundles[pick % len(bundles)]
        lines = bundle.read_bytes().split(b"\n")
        i = 1 + pick % (len(lines) - 2)
        lines[i] = flip(lines[i], offset % len(lines[i]), 0x01 if pick % 2 else mask)
        bundle.write_bytes(b"\n".join(lines))
        mine, theirs = V.verify_bundle_file(bundle), verify_bundle(bundle)
        if theirs.problem is not None and "canonical form" in theirs.problem.reason:
            # Same value, other spelling (`1E5`): only the journal's verifier re-encodes
            # lines (optional, docs "Verifying"); the outsider's sees the trailer digest.
            assert not mine.ok, mine
        else:
            assert_agree_bad(mine, theirs)
