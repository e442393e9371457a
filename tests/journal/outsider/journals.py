"""Building journals through the public API, tampering with copies, and comparing the
outsider's verifier with the journal's own (docs/journal/format.md is all the former knows)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb

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


def body_offset(rec: Stored) -> int:
    slen: int = struct.unpack(">I", rec.value[134:138])[0]
    return 138 + slen


def checkpoint_entries(d: Path) -> list[tuple[bytes, bytes]]:
    env = lmdb.open(str(d / "journal"), readonly=True, lock=False, max_dbs=64)
    try:
        with env.begin() as txn:
            db = env.open_db(b"_checkpoints", txn=txn, create=False)
            return [(bytes(k), bytes(v)) for k, v in txn.cursor(db=db)]
    finally:
        env.close()


def data_dir_key(d: Path) -> bytes:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    seed = (d / "journal" / "checkpoint_ed25519.key").read_bytes()
    return Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()


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
