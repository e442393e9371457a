"""Verifying an exported bundle ("Bundle format", "Verifying")."""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._covers import Claim, check_claim, claims_of
from ._layout import (
    EVENT_ARRAY_FIELDS,
    GENESIS,
    RECORD_TAG,
    canon,
    checkpoint_message,
    ed25519_ok,
    event_hash,
    seal_message,
    sha256,
    text,
    u32,
    u64,
)
from ._walk import Bad, Chain, LineBad, Rec, Report, fail_report

# -- bundles -------------------------------------------------------------------------------

def _hx(v: Any, what: str, line: int) -> bytes:
    if not isinstance(v, str) or len(v) != 64 or v != v.lower():
        raise LineBad(f"line {line}: {what} is not 64 lowercase hex digits")
    return bytes.fromhex(v)


def _int(v: Any, what: str, line: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise LineBad(f"line {line}: {what} is not an integer")
    return v


def _str(v: Any, what: str, line: int) -> str:
    if not isinstance(v, str):
        raise LineBad(f"line {line}: {what} is not a string")
    return v


@dataclass
class _Bundle:
    version: int = 0
    scope: str = ""
    session_id: str = ""
    trusted: frozenset[bytes] = frozenset()
    chain: Chain = field(default_factory=Chain)
    group: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    event_lines: int = 0
    link_lines: int = 0
    checkpoints: int = 0
    signed_through: int = -1
    seal: tuple[int, bytes] | None = None
    seal_trusted: bool = False
    claims: list[Claim] = field(default_factory=list)


def _lines(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(line number from 1, offset, line bytes without the newline)."""
    off = 0
    n = 0
    while off < len(data):
        end = data.find(b"\n", off)
        if end < 0:
            raise LineBad("bundle truncated (last line has no newline)")
        n += 1
        yield n, off, data[off:end]
        off = end + 1


def verify_bundle_file(path: Path, trusted_keys: Collection[bytes] = ()) -> Report:
    """Verify an exported bundle ("Bundle format", "Verifying")."""
    b = _Bundle(trusted=frozenset(trusted_keys))
    try:
        _walk_bundle(Path(path).read_bytes(), b)
    except LineBad as bad:
        bad.position = b.chain.position + 1
        return fail_report(b.chain.finish(), bad)
    except Bad as bad:
        return fail_report(b.chain.finish(), bad)
    r = b.chain.finish()
    r.checkpoints = b.checkpoints
    return r


def _walk_bundle(data: bytes, b: _Bundle) -> None:
    done = False
    for n, off, raw in _lines(data):
        if done:
            raise LineBad(f"line {n}: data after the trailer")
        try:
            obj = json.loads(raw, object_pairs_hook=_unique)
        except _DuplicateKey as e:
            _flush(b)  # the doc: a duplicate key anywhere makes the line malformed
            raise LineBad(f"line {n}: duplicate key {e}") from e
        except ValueError as e:
            _flush(b)  # any line ends the pending record, even a malformed one
            raise LineBad(f"line {n}: not JSON") from e
        if not isinstance(obj, dict) or not _well_formed(n, obj):
            _flush(b)
            raise LineBad(f"line {n}: malformed line")
        t = obj.get("type")
        if n == 1:
            _header_line(obj, b)
            continue
        if t in ("event", "link"):
            if b.group and (b.version == 1 or _group_key(b.group[-1][1]) != _group_key(obj)):
                _flush(b)
            b.group.append((n, obj))
            continue
        _flush(b)
        if t == "pruned":
            _pruned_line(n, obj, b)
        elif t == "checkpoint":
            _checkpoint_line(n, obj, b)
        elif t == "seal":
            _seal_line(n, obj, b, hashlib.sha256(data[:off]).digest())
        elif t == "trailer":
            _trailer_line(n, obj, b, hashlib.sha256(data[:off]).hexdigest())
            done = True
        else:
            raise LineBad(f"line {n}: unknown type {t!r}")
    if not done:
        raise LineBad("bundle truncated (no trailer)")
    if b.scope == "full":
        b.chain.check_pruned_claim()
    if b.claims:
        _check_claims(data, b)
    if b.trusted and (b.seal is None or not b.seal_trusted):
        raise Bad(None, "the bundle has no seal by a trusted key")


_STR, _INT, _HEX, _ANY, _LIST = "str", "int", "hex", "any", "list"
LINE_FIELDS: dict[str, dict[str, str]] = {
    "header": {"format": _STR, "version": _INT, "scope": _STR, "session_id": _STR,
               "hash": _STR, "exported_at_ms": _INT},
    "event": {"position": _INT, "event_id": _STR, "session_id": _STR, "run_id": _STR,
              "tape_seq": _INT, "kind": _STR, "actor": _STR, "ts_ms": _INT,
              "principal": _STR, "device_id": _STR, "channel": _STR, "payload": _ANY,
              "redactions": _LIST, "prev_hash": _HEX, "hash": _HEX, "global_hash": _HEX},
    "link": {"position": _INT, "hash": _HEX, "global_hash": _HEX},
    "pruned": {"position": _INT, "last": _INT, "session_id": _STR, "prev_hash": _HEX,
               "hash": _HEX, "global_hash": _HEX},
    # A checkpoint's or seal's hex is checked with its signature, not as line syntax.
    "checkpoint": {"position": _INT, "head_hash": _STR, "ts_ms": _INT, "public_key": _STR,
                   "signature": _STR},
    "seal": {"head_position": _INT, "head_hash": _STR, "session_head": _STR,
             "session_events": _INT, "ts_ms": _INT, "public_key": _STR, "signature": _STR},
    "trailer": {"events": _INT, "links": _INT, "checkpoints": _INT, "head_position": _INT,
                "head_hash": _HEX, "session_head": _STR, "sha256": _STR},
}


class _DuplicateKey(ValueError):
    pass


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(repr(k))
        out[k] = v
    return out


def _well_formed(n: int, o: dict[str, Any]) -> bool:
    """The line has exactly its type's keys, each of its type (hex: 64 lowercase digits);
    a version 5 seal also ``sha256`` (a string: like the seal's other hex, it is checked
    against what it covers, not as line syntax)."""
    fields = LINE_FIELDS.get(o.get("type"))  # type: ignore[arg-type]
    if fields is not None and o.get("type") == "seal" and "sha256" in o:
        fields = {**fields, "sha256": _STR}
    if fields is None or set(o) != {"type", *fields}:
        return False
    for k, kind in fields.items():
        v = o[k]
        if kind == _INT and (isinstance(v, bool) or not isinstance(v, int)):
            return False
        if kind in (_STR, _HEX) and not isinstance(v, str):
            return False
        if kind == _HEX and (len(v) != 64 or v.strip("0123456789abcdef")):
            return False
        if kind == _LIST and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            return False
    return True


def _check_claims(data: bytes, b: _Bundle) -> None:
    """The second pass: each compaction's covered events, from the event lines."""
    by_run: dict[str, list[Claim]] = {}
    for c in b.claims:
        by_run.setdefault(c.run, []).append(c)
    for _n, _off, raw in _lines(data):
        o = json.loads(raw)
        if o.get("type") != "event" or o["run_id"] not in by_run:
            continue
        for c in by_run[o["run_id"]]:
            if c.first <= o["tape_seq"] <= c.last and o["position"] < c.position:
                c.found.append((o["tape_seq"], o["kind"], canon(o["payload"])))
    tomb = b.chain.last_tombstone
    for c in b.claims:
        check_claim(c, pruned=tomb is not None and tomb[0] < c.position)


def _group_key(o: dict[str, Any]) -> tuple[Any, Any, Any]:
    return o.get("type"), o.get("hash"), o.get("global_hash")


def _header_line(o: dict[str, Any], b: _Bundle) -> None:
    if o.get("type") != "header" or o.get("format") != "palyra.journal.bundle":
        raise LineBad("line 1: not a palyra.journal.bundle header")
    if o.get("version") not in (1, 2, 3, 4, 5) or o.get("hash") != "sha256":
        raise LineBad("line 1: unknown version or hash")
    if o.get("scope") not in ("full", "session"):
        raise LineBad("line 1: unknown scope")
    b.version, b.scope = o["version"], o["scope"]
    b.session_id = _str(o.get("session_id"), "session_id", 1)
    if b.scope == "full" and b.session_id != "":
        raise LineBad("line 1: a full bundle's session_id must be \"\"")


def _flush(b: _Bundle) -> None:
    if not b.group:
        return
    group, b.group = b.group, []
    chain = b.chain
    n0, o0 = group[0]
    first = _int(o0.get("position"), "position", n0)
    for i, (n, o) in enumerate(group):
        if _int(o.get("position"), "position", n) != first + i:
            # "The lines' positions must be position+1, position+2, ...": the first bad
            # position is where the chain expected this line (the group's start when
            # its first line is already off the chain).
            at = chain.position + 1 + (i if first == chain.position + 1 else 0)
            raise Bad(at, f"entry for position {o.get('position')} is out of order")
    last = first + len(group) - 1
    chain.check_positions(first, last, None)
    h = _hx(o0.get("hash"), "hash", n0)
    gh = _hx(o0.get("global_hash"), "global_hash", n0)
    if o0["type"] == "link":
        if b.scope != "session":
            raise Bad(first, f"line {n0}: link line in a full bundle")
        b.link_lines += len(group)
        chain.accept(Rec("link", first, last, None, None, h, gh))
        return
    session = _str(o0.get("session_id"), "session_id", n0)
    prev = _hx(o0.get("prev_hash"), "prev_hash", n0)
    if b.scope == "session" and session != b.session_id:
        raise Bad(first, f"line {n0}: event of another session in a session bundle")
    events = []
    for n, o in group:
        if o.get("session_id") != session or o.get("prev_hash") != o0.get("prev_hash"):
            raise Bad(first, "events of one record disagree on session or prev_hash")
        ev: dict[str, Any] = {}
        for f in EVENT_ARRAY_FIELDS:
            if f not in o:
                raise LineBad(f"line {n}: no {f!r}")
            ev[f] = o[f]
        for f in ("event_id", "run_id", "kind", "actor", "principal", "device_id", "channel"):
            _str(ev[f], f, n)
        _int(ev["tape_seq"], "tape_seq", n)
        _int(ev["ts_ms"], "ts_ms", n)
        if not isinstance(ev["redactions"], list):
            raise LineBad(f"line {n}: redactions is not a list")
        events.append(ev)
    b.event_lines += len(group)
    try:
        body = canon([[ev[f] for f in EVENT_ARRAY_FIELDS] for ev in events])
        got = sha256(RECORD_TAG, prev, u64(first), u32(len(group)), text(session), body)
        if got != h and len(group) == 1:
            ev = events[0]
            got = event_hash(prev, first, ev, session, canon(ev["payload"]))
    except (ValueError, TypeError, struct.error) as e:
        raise Bad(first, f"line {n0}: a value does not fit its encoding ({e})") from e
    if got != h:
        raise Bad(first, "hash mismatch (payload or header changed)")
    chain.accept(Rec("record", first, last, session, prev, h, gh, events))
    b.claims.extend(claims_of(first, events))


def _pruned_line(n: int, o: dict[str, Any], b: _Bundle) -> None:
    first = _int(o.get("position"), "position", n)
    last = _int(o.get("last"), "last", n)
    b.chain.check_positions(first, last, None)
    session = _str(o.get("session_id"), "session_id", n)
    if b.scope == "session" and session != b.session_id:
        raise Bad(first, f"line {n}: pruned line of another session in a session bundle")
    rec = Rec("tombstone", first, last, session, _hx(o.get("prev_hash"), "prev_hash", n),
              _hx(o.get("hash"), "hash", n), _hx(o.get("global_hash"), "global_hash", n))
    b.chain.accept(rec)


def _checkpoint_line(n: int, o: dict[str, Any], b: _Bundle) -> None:
    pos = _int(o.get("position"), "position", n)
    ts = _int(o.get("ts_ms"), "ts_ms", n)
    if pos > b.chain.position:
        raise Bad(pos, f"checkpoint at position {pos} is beyond the verified chain")
    if pos != b.chain.position:
        raise Bad(pos, f"line {n}: checkpoint is not at the current position")
    try:
        head, key, sig = (bytes.fromhex(o[f]) for f in ("head_hash", "public_key", "signature"))
    except ValueError as e:
        raise Bad(pos, "checkpoint head, key or signature is not hex") from e
    if len(head) != 32 or not ed25519_ok(key, sig, checkpoint_message(pos, head, ts)):
        raise Bad(pos, "checkpoint signature is invalid")
    if b.trusted and key not in b.trusted:
        raise Bad(pos, "checkpoint signed by an untrusted key")
    if head != b.chain.prev_global:
        raise Bad(pos, "signed checkpoint does not match the chain head here")
    b.checkpoints += 1
    if key in b.trusted:
        b.signed_through = pos


def _seal_line(n: int, o: dict[str, Any], b: _Bundle, before: bytes) -> None:
    hp = _int(o.get("head_position"), "head_position", n)
    sealed_digest = before if b.version >= 5 else None
    if (b.version >= 5) != ("sha256" in o):
        raise Bad(None, f"line {n}: a version {b.version} seal must "
                        f"{'' if b.version >= 5 else 'not '}carry sha256")
    if sealed_digest is not None and o["sha256"] != sealed_digest.hex():
        raise Bad(None, f"line {n}: the seal's sha256 is not that of the lines before it")
    if b.trusted and sealed_digest is None and b.chain.report.pruned:
        raise Bad(None, f"line {n}: a version {b.version} seal does not cover pruned lines")
    if hp != b.chain.position or o["head_hash"] != b.chain.prev_global.hex():
        raise LineBad(f"the seal covers up to position {hp}, the bundle to "
                      f"{b.chain.position}")
    se = _int(o.get("session_events"), "session_events", n)
    ts = _int(o.get("ts_ms"), "ts_ms", n)
    try:
        head, sh, key, sig = (bytes.fromhex(o[f]) for f in
                              ("head_hash", "session_head", "public_key", "signature"))
    except ValueError as e:
        raise Bad(None, "the seal's hashes, key or signature are not hex") from e
    msg = seal_message(b.scope, b.session_id, hp, head, sh, se, ts, sealed_digest)
    if len(head) != 32 or len(sh) != 32 or not ed25519_ok(key, sig, msg):
        raise Bad(None, "the seal's signature is invalid")
    if b.scope == "session":
        want_h = b.chain.sessions.get(b.session_id, GENESIS)
        want_n = b.chain.session_events.get(b.session_id, 0)
    else:
        want_h, want_n = GENESIS, 0
    if sh != want_h or se != want_n:
        raise Bad(None, f"the seal says session {b.session_id!r} has {se} events up to here, "
                        f"the bundle holds {want_n}")
    b.seal = (hp, head)
    b.seal_trusted = key in b.trusted
    if b.trusted and not b.seal_trusted:
        raise Bad(None, "bundle sealed by an untrusted key")


def _trailer_line(n: int, o: dict[str, Any], b: _Bundle, digest: str) -> None:
    chain = b.chain
    session_head = chain.sessions.get(b.session_id, GENESIS).hex() if b.scope == "session" else ""
    if o["head_position"] != chain.position or o["head_hash"] != chain.prev_global.hex():
        raise LineBad(f"bundle ends at position {chain.position} but its trailer says "
                      f"{o.get('head_position')}")
    want = {"events": b.event_lines, "links": b.link_lines, "checkpoints": b.checkpoints,
            "head_position": chain.position, "head_hash": chain.prev_global.hex(),
            "session_head": session_head, "sha256": digest}
    for k, v in want.items():
        if o.get(k) != v:
            raise Bad(None, f"bundle trailer: {k} is {o.get(k)!r}, the bundle has {v!r}")
