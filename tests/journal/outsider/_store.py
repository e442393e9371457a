"""Verifying a live data dir: `_events` records, checkpoints, indexes."""

from __future__ import annotations

import struct
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb
import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
)

from ._covers import Claim, check_claim, claims_of
from ._layout import (
    EVENT_ARRAY_FIELDS,
    RECORD_TAG,
    canon,
    checkpoint_message,
    ed25519_ok,
    event_hash,
    sha256,
    u16,
    u64,
)
from ._walk import Bad, Chain, Rec, Report, fail_report

# -- live data dir -------------------------------------------------------------------------

def _event_from_array(arr: Any) -> dict[str, Any]:
    if not isinstance(arr, list) or len(arr) != len(EVENT_ARRAY_FIELDS):
        raise ValueError("event array")
    return dict(zip(EVENT_ARRAY_FIELDS, arr, strict=True))


def _hash_bytes(v: Any) -> bytes:
    """A format 1 record's hash field: bin 32."""
    if isinstance(v, bytes) and len(v) == 32:
        return v
    raise ValueError("hash field")


FORMAT1_FIELDS: dict[str, type] = {
    "position": int, "event_id": str, "session_id": str, "run_id": str, "tape_seq": int,
    "kind": str, "actor": str, "ts_ms": int, "principal": str, "device_id": str,
    "channel": str, "v": int, "payload": bytes, "redactions": list, "prev_hash": bytes,
    "hash": bytes, "global_hash": bytes}


def _format1_shape_ok(m: dict[Any, Any]) -> bool:
    """Every format 1 field, of its type ("Format 1")."""
    for name, kind in FORMAT1_FIELDS.items():
        v = m.get(name)
        if not isinstance(v, kind) or isinstance(v, bool):
            return False
    # `v` (1) is not hashed and not checked: any int passes, as in the journal's verifier.
    return all(isinstance(p, str) for p in m["redactions"])


def parse_stored(key: bytes, val: bytes, expected: int) -> Rec:
    """Parse and hash-check one `_events` value (formats 1, 2, 3)."""
    if len(key) != 8:
        raise Bad(expected, "undecodable record (key is not a u64)")
    k = struct.unpack(">Q", key)[0]
    tag = val[:1]
    try:
        if tag == b"\x02":
            if len(val) < 138 or val[65:90] != RECORD_TAG:
                raise ValueError("short or untagged")
            rh, gh, prev = val[1:33], val[33:65], val[90:122]
            first, count = struct.unpack(">QI", val[122:134])
            (slen,) = struct.unpack(">I", val[134:138])
            session = val[138:138 + slen].decode("utf-8")
            if sha256(val[65:]) != rh:
                raise Bad(expected, "hash mismatch (payload or header changed)")
            body = msgspec.msgpack.decode(val[138 + slen:])
            if not isinstance(body, list):
                raise ValueError("body")
            if count < 1 or len(body) != count:
                raise Bad(expected, f"record says count={count}, its body holds {len(body)}")
            events = [_event_from_array(a) for a in body]
            rec = Rec("record", first, first + count - 1, session, prev, rh, gh, events)
        elif tag == b"\x03":
            if len(val) < 122:
                raise ValueError("short tombstone")
            first, count = struct.unpack(">QI", val[97:109])
            (slen,) = struct.unpack(">I", val[118:122])
            # Byte 109 (source format) and 110..118 (pruned_at_ms) are informational: no
            # hash covers them, so they cannot be checked.
            if len(val) != 122 + slen or count < 1:
                raise ValueError("tombstone shape")
            session = val[122:].decode("utf-8")
            rec = Rec("tombstone", first, first + count - 1, session, val[65:97], val[1:33],
                      val[33:65])
        elif tag == b"\xde":
            m = msgspec.msgpack.decode(val)
            if not isinstance(m, dict) or not _format1_shape_ok(m):
                raise ValueError("format 1 shape")
            pos = m["position"]
            prev, h, gh = (_hash_bytes(m[f]) for f in ("prev_hash", "hash", "global_hash"))
            payload_bytes = m["payload"]
            ev = {f: m[f] for f in EVENT_ARRAY_FIELDS if f != "payload"}
            if event_hash(prev, pos, ev, m["session_id"], payload_bytes) != h:
                raise Bad(expected, "hash mismatch (payload or header changed)")
            ev["payload"] = msgspec.msgpack.decode(payload_bytes)
            rec = Rec("record", pos, pos, m["session_id"], prev, h, gh, [ev])
        else:
            raise ValueError(f"format tag {tag.hex()}")
    except Bad:
        raise
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, struct.error,
            msgspec.DecodeError) as e:
        raise Bad(expected, f"undecodable record ({e})") from e
    del k  # the caller checks the key against `last` (Chain.check_positions)
    return rec


@dataclass(frozen=True)
class StoredCheckpoint:
    """One `CheckpointRecord`: the fields of its value (the key only orders them)."""

    position: int
    ts_ms: int
    head: bytes
    public_key: bytes
    signature: bytes


def _signing_public_key(journal_dir: Path) -> bytes | None:
    p = journal_dir / "checkpoint_ed25519.key"
    if not p.exists():
        return None
    seed = p.read_bytes()
    return Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()


CHECKPOINT_FIELDS = {"head": bytes, "position": int, "public_key": bytes, "signature": bytes,
                     "ts_ms": int, "v": int}


def decode_checkpoint(raw: bytes) -> StoredCheckpoint:
    """A MessagePack map holding every `CheckpointRecord` field, each of its type."""
    try:
        value = msgspec.msgpack.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise Bad(None, "undecodable checkpoint record") from e
    if not isinstance(value, dict):
        raise Bad(None, "undecodable checkpoint record")
    for name, kind in CHECKPOINT_FIELDS.items():
        v = value.get(name)
        if not isinstance(v, kind) or isinstance(v, bool):
            raise Bad(None, f"undecodable checkpoint record ({name})")
    # The signed message packs position as u64 and ts_ms as i64 (docs, "Checkpoints").
    if value["position"] < 0 or not -(1 << 63) <= value["ts_ms"] < 1 << 63:
        raise Bad(None, "undecodable checkpoint record (out of range)")
    return StoredCheckpoint(value["position"], value["ts_ms"], value["head"],
                            value["public_key"], value["signature"])


def check_checkpoint(cp: StoredCheckpoint, chain: Chain, trusted: Collection[bytes]) -> bool:
    """Check a checkpoint the walk reached (`cp.position <= chain.position`); True if trusted.

    Order as the journal's verifier: placement, head, signature, trust.
    """
    pos = cp.position
    if pos != chain.position:
        raise Bad(pos, "checkpoint out of order (not at a record end)")
    if cp.head != chain.prev_global:
        raise Bad(pos, "signed checkpoint does not match the chain head here")
    if not ed25519_ok(cp.public_key, cp.signature, checkpoint_message(pos, cp.head, cp.ts_ms)):
        raise Bad(pos, "checkpoint signature is invalid")
    if trusted and cp.public_key not in trusted:
        raise Bad(pos, "checkpoint signed by an untrusted key")
    return cp.public_key in trusted


def _open_db(env: Any, name: bytes) -> Any | None:
    try:
        return env.open_db(name, create=False)
    except lmdb.NotFoundError:
        return None


def verify_data_dir(data_dir: Path, trusted_keys: Collection[bytes] = ()) -> Report:
    """Verify a live data dir: records, both chains, indexes, checkpoints."""
    jdir = Path(data_dir) / "journal"
    chain = Chain()
    env = lmdb.open(str(jdir), readonly=True, lock=False, max_dbs=64, subdir=True)
    try:
        events_db = _open_db(env, b"_events")
        cps_db = _open_db(env, b"_checkpoints")
        ids_db = _open_db(env, b"_event_ids")
        by_session_db = _open_db(env, b"_by_session")
        tape_db = _open_db(env, b"_tape")
        data_key = _signing_public_key(jdir)
        with env.begin() as txn:
            cps: list[StoredCheckpoint] = []
            try:
                if cps_db is not None:
                    cps = [decode_checkpoint(bytes(v)) for _k, v in txn.cursor(db=cps_db)]
            except Bad as bad:
                return fail_report(chain.report, bad)
            chain.report.foreign_keys = sum(c.public_key != data_key for c in cps)
            indexes = _Indexes(txn, ids_db, by_session_db, tape_db)
            try:
                signed_through = _walk_store(txn, events_db, chain, cps, set(trusted_keys),
                                             indexes, tape_db)
                chain.check_pruned_claim()
                indexes.finish(chain)
                if trusted_keys and signed_through < chain.position:
                    raise Bad(max(signed_through, 0) + 1,
                              f"signed through position {signed_through} of {chain.position}")
            except Bad as bad:
                return fail_report(chain.finish(), bad)
            chain.report.checkpoints = len(cps)
    finally:
        env.close()
    return chain.finish()


def _collect_tape(txn: Any, events_db: Any, tape_db: Any | None, claim: Claim) -> None:
    """Fill `claim.found` from the run's tape through `_tape`, stopping at a gap."""
    if tape_db is None:
        return
    run = claim.run.encode()
    prefix = u16(len(run)) + run
    cur = txn.cursor(db=tape_db)
    cached: tuple[int, Rec | None] = (-1, None)
    for seq in range(claim.first, claim.last + 1):
        if not cur.set_range(prefix + u64(seq)) or not cur.key().startswith(prefix):
            return
        last = struct.unpack(">Q", cur.value())[0]
        if cached[0] != last:
            raw = txn.get(u64(last), db=events_db)
            if raw is None:
                return
            cached = (last, parse_stored(u64(last), bytes(raw), last))
        rec = cached[1]
        if rec is None or rec.kind == "tombstone":
            continue  # pruned: check_claim passes over an incomplete span then
        for ev in rec.events:
            if ev["run_id"] == claim.run and ev["tape_seq"] == seq:
                claim.found.append((seq, ev["kind"], canon(ev["payload"])))
                break
        else:
            return


def _walk_store(txn: Any, events_db: Any | None, chain: Chain, cps: list[StoredCheckpoint],
                trusted: set[bytes], indexes: _Indexes, tape_db: Any | None) -> int:
    """Walk `_events` in key order; checkpoints (in key order) as the walk reaches them."""
    ci = 0
    signed_through = -1

    def reached() -> None:
        nonlocal ci, signed_through
        while ci < len(cps) and cps[ci].position <= chain.position:
            if check_checkpoint(cps[ci], chain, trusted):
                signed_through = chain.position
            ci += 1

    reached()
    if events_db is not None:
        for key, val in txn.cursor(db=events_db):
            rec = parse_stored(key, val, chain.position + 1)
            chain.check_positions(rec.first, rec.last, struct.unpack(">Q", key)[0],
                                  key_first=rec.kind == "tombstone")
            chain.accept(rec)
            indexes.record(rec)
            if rec.kind == "record":
                for claim in claims_of(rec.first, rec.events):
                    _collect_tape(txn, events_db, tape_db, claim)
                    check_claim(claim, pruned=chain.last_tombstone is not None)
            reached()
    if ci < len(cps):
        raise Bad(chain.position + 1, f"checkpoint at position {cps[ci].position} is beyond "
                                      f"the verified chain")
    return signed_through


class _Indexes:
    """`_event_ids`, `_by_session`, `_tape` against the records ("Storage layout")."""

    def __init__(self, txn: Any, ids_db: Any, by_session_db: Any, tape_db: Any) -> None:
        self.txn, self.ids_db, self.by_session_db, self.tape_db = (
            txn, ids_db, by_session_db, tape_db)
        self.next_seq: dict[str, int] = {}
        self.records = 0
        self.problem: Bad | None = None  # reported after the chain walk: chain problems first

    def _get(self, db: Any, key: bytes) -> bytes | None:
        if db is None:
            return None
        v = self.txn.get(key, db=db)
        return None if v is None else bytes(v)

    def record(self, rec: Rec) -> None:
        self.records += 1
        if self.problem is None:
            try:
                self._record(rec)
            except Bad as bad:
                self.problem = bad

    def _record(self, rec: Rec) -> None:
        assert rec.session_id is not None
        sk = u16(len(rec.session_id.encode())) + rec.session_id.encode() + u64(rec.last)
        if self._get(self.by_session_db, sk) != b"":
            raise Bad(rec.first, "index: _by_session has no entry for this record")
        last_seq: dict[str, int] = {}
        for i, ev in enumerate(rec.events):
            pos = rec.first + i
            if self._get(self.ids_db, ev["event_id"].encode("ascii")) != u64(pos):
                raise Bad(pos, f"index: _event_ids[{ev['event_id']}] is not {pos}")
            seq, run = ev["tape_seq"], ev["run_id"]
            if seq == -1:
                continue
            if not run:
                raise Bad(pos, "tape event without run")
            want = self.next_seq.get(run)
            if want is None:
                want = self._first_kept_seq(run, rec.first)
            if seq != want:
                raise Bad(pos, f"tape seq {seq} of run {run!r}, expected {want}")
            self.next_seq[run] = seq + 1
            last_seq[run] = seq
        for run, seq in last_seq.items():
            rk = u16(len(run.encode())) + run.encode() + u64(seq)
            if self._get(self.tape_db, rk) != u64(rec.last):
                raise Bad(rec.first, f"index: _tape has no entry ({run!r}, {seq}) -> {rec.last}")

    def _first_kept_seq(self, run: str, first: int) -> int:
        """0, or one past the highest seq of `run` held by earlier (pruned) records."""
        if self.tape_db is None:
            return 0
        prefix = u16(len(run.encode())) + run.encode()
        nxt = 0
        cur = self.txn.cursor(db=self.tape_db)
        if cur.set_range(prefix):
            for k, v in cur:
                if not k.startswith(prefix) or len(k) != len(prefix) + 8:
                    break
                if struct.unpack(">Q", v)[0] >= first:
                    break
                nxt = struct.unpack(">Q", k[len(prefix):])[0] + 1
        return nxt

    def finish(self, chain: Chain) -> None:
        if self.problem is not None:
            raise self.problem
        head = chain.position
        seen = bytearray(head + 1)
        n = 0
        if self.ids_db is not None:
            for _k, v in self.txn.cursor(db=self.ids_db):
                p = struct.unpack(">Q", v)[0] if len(v) == 8 else 0
                if not 1 <= p <= head or seen[p]:
                    raise Bad(p if 1 <= p <= head else None,
                              f"index: _event_ids holds position {p} twice or out of range")
                seen[p] = 1
                n += 1
        if n != head:
            raise Bad(None, f"index: _event_ids holds {n} ids for {head} positions")
        m = 0
        if self.by_session_db is not None:
            m = self.txn.stat(self.by_session_db)["entries"]
        if m != self.records:
            raise Bad(None, f"index: _by_session holds {m} keys for {self.records} records")

