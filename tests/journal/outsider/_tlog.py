"""The transparency log, from docs/journal/format.md "Transparency log" alone.

Nothing here imports palyra. The tree hashing is written from the doc's `MTH`
definition (recursive, not the RFC's iterative verifier), so the two
implementations check each other.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass
from pathlib import Path

import lmdb

from ._layout import ed25519_ok, sha256

DASH = "\u2014 "


def b64(text: str) -> bytes:
    """Canonical base64 only: decode, re-encode, compare."""
    raw = base64.b64decode(text, validate=True)
    if base64.b64encode(raw).decode() != text:
        raise ValueError("not canonical base64")
    return raw


def leaf(entry: bytes) -> bytes:
    return sha256(b"\x00", entry)


def mth(leaves: list[bytes]) -> bytes:
    if not leaves:
        return sha256(b"")
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return sha256(b"\x01", mth(leaves[:k]), mth(leaves[k:]))


def root_from_path(index: int, size: int, start_leaf: bytes, path: list[bytes]) -> bytes | None:
    """The root `path` gives for `start_leaf` at `index` of `size` (PATH's recursion, inverted)."""
    if not 0 <= index < size:
        return None
    # The sibling order of PATH: descend from the whole tree, note each split, then fold up.
    splits: list[tuple[bool, int]] = []  # (leaf is on the left, ...)
    lo, hi = 0, size
    while hi - lo > 1:
        k = 1
        while k * 2 < hi - lo:
            k *= 2
        if index < lo + k:
            splits.append((True, 0))
            hi = lo + k
        else:
            splits.append((False, 0))
            lo = lo + k
    if len(splits) != len(path):
        return None
    node = start_leaf
    for (on_left, _), sibling in zip(reversed(splits), path, strict=True):
        node = sha256(b"\x01", node, sibling) if on_left else sha256(b"\x01", sibling, node)
    return node


def key_id(name: str, public_key: bytes, kind: int) -> bytes:
    return sha256(name.encode(), b"\n", bytes([kind]), public_key)[:4]


@dataclass
class Checked:
    ok: bool
    reason: str = ""
    index: int = -1
    size: int = -1
    first: int = 0
    count: int = 0
    events: int = 0
    pruned: int = 0


def check_note(note: bytes, public_key: bytes) -> tuple[str, int, bytes] | str:
    """(origin, size, root) of a checkpoint note signed by `public_key`, else why not."""
    text = note.decode("utf-8")
    cut = text.rfind("\n\n")
    if cut < 0 or not text.endswith("\n"):
        return "not a signed note"
    body, sigs = text[: cut + 1], text[cut + 2 :].splitlines()
    lines = body.split("\n")
    if len(lines) < 4:
        return "checkpoint has fewer than three lines"
    origin, size_text, root_b64 = lines[0], lines[1], lines[2]
    if not size_text.isdigit() or (size_text != "0" and size_text.startswith("0")):
        return "bad size line"
    root = b64(root_b64)
    want = key_id(origin, public_key, 0x01)
    for line in sigs:
        if not line.startswith(DASH):
            return "bad signature line"
        name, sig_b64 = line[len(DASH):].split(" ")
        raw = b64(sig_b64)
        if name == origin and raw[:4] == want:
            if ed25519_ok(public_key, raw[4:], body.encode()):
                return origin, int(size_text), root
            return "log signature invalid"
    return "no signature by the log's key"


def verify_proof_text(proof: bytes, public_key: bytes) -> Checked:
    head, _sep, note = proof.partition(b"\n\n")
    lines = head.decode().split("\n")
    if lines[0] != "c2sp.org/tlog-proof@v1" or not lines[1].startswith("extra ") or not (
        lines[2].startswith("index ")
    ):
        return Checked(False, "proof header")
    record = b64(lines[1][6:])
    index = int(lines[2][6:])
    path = [b64(line) for line in lines[3:]]
    checked = check_note(note, public_key)
    if isinstance(checked, str):
        return Checked(False, checked)
    _origin, size, root = checked
    if record[:1] != b"\x02" or sha256(record[65:]) != record[1:33]:
        return Checked(False, "record does not hash to its record_hash")
    if root_from_path(index, size, leaf(record[1:33]), path) != root:
        return Checked(False, "inclusion proof does not lead to the root")
    first, count = struct.unpack(">QI", record[122:134])
    return Checked(True, "", index, size, first, count)


def verify_tree(data_dir: Path) -> Checked:
    """The data dir's tree against its records ("Verifying a data dir's tree")."""
    env = lmdb.open(str(data_dir / "journal"), readonly=True, lock=False, max_dbs=32)
    try:
        with env.begin() as txn:
            events = env.open_db(b"_events", txn=txn, create=False)
            tlog = env.open_db(b"_tlog", txn=txn, create=False)
            heads = env.open_db(b"_tlog_checkpoints", txn=txn, create=False)
            entries: list[bytes] = []
            for key, value in txn.cursor(db=events):
                value = bytes(value)
                if value[0] not in (2, 3):
                    return Checked(False, "this outsider reads format 2 and 3 records only")
                entry = value[1:33]
                row = txn.get(b"\x00\x00" + b"\x00" + struct.pack(">Q", len(entries)), db=tlog)
                if row != entry + bytes(key):
                    return Checked(False, f"tree entry {len(entries)} does not match", len(entries))
                entries.append(entry)
            leaves = [leaf(e) for e in entries]
            for level in (8, 16):
                width = 1 << level
                for j in range(len(leaves) // width):
                    row = txn.get(b"\x00\x00" + bytes([level]) + struct.pack(">Q", j), db=tlog)
                    if row != mth(leaves[j * width:(j + 1) * width]):
                        return Checked(False, f"level {level} row {j} is not the tile's root")
            extra = txn.get(b"\x00\x00\x00" + struct.pack(">Q", len(entries)), db=tlog)
            if extra is not None:
                return Checked(False, "the tree holds more entries than the journal records")
            note = txn.get(b"\x00\x00", db=heads)
        if note is not None:
            seed = (data_dir / "journal" / "checkpoint_ed25519.key").read_bytes()
            from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
            from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

            public_key = Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes(
                Encoding.Raw, PublicFormat.Raw)
            checked = check_note(bytes(note), public_key)
            if isinstance(checked, str):
                return Checked(False, checked)
            _origin, size, root = checked
            if size > len(entries) or mth(leaves[:size]) != root:
                return Checked(False, "the signed checkpoint is not the tree's root at its size")
        return Checked(True, "", size=len(entries))
    finally:
        env.close()


def verify_session_proofs(data: bytes, public_key: bytes) -> Checked:
    """A `palyra.journal.session-proofs` file ("Session proofs"), with the key: what
    `palyra journal export --session S` writes. Any malformed line is a refusal."""
    try:
        return _session_proofs(data, public_key)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, struct.error) as exc:
        return Checked(False, f"malformed: {exc!r}")


def _session_proofs(data: bytes, public_key: bytes) -> Checked:
    import json

    lines = data.split(b"\n")
    if lines[-1] != b"":
        return Checked(False, "no final newline")
    lines = lines[:-1]
    objs = [json.loads(raw) for raw in lines]
    header, cp, end = objs[0], objs[1], objs[-1]
    if (header["type"], header["format"], header["version"]) != (
        "header", "palyra.journal.session-proofs", 1
    ):
        return Checked(False, "header")
    checked = check_note(cp["note"].encode(), public_key)
    if isinstance(checked, str):
        return Checked(False, checked)
    _origin, size, root = checked
    session = header["session_id"]
    prev, last_first, last_index, events, pruned = bytes(32), 0, -1, 0, 0
    for obj in objs[2:-1]:
        if obj["type"] != "record":
            return Checked(False, "not a record line")
        record = b64(obj["record"])
        if record[0] == 2:
            if sha256(record[65:]) != record[1:33]:
                return Checked(False, "record hash")
            prev_at, first_at, session_at = 90, 122, 134
        elif record[0] == 3:
            prev_at, first_at, session_at = 65, 97, 118
        else:
            return Checked(False, "record format")
        n = struct.unpack(">I", record[session_at:session_at + 4])[0]
        if record[session_at + 4:session_at + 4 + n].decode() != session:
            return Checked(False, "another session")
        first = struct.unpack(">Q", record[first_at:first_at + 8])[0]
        count = struct.unpack(">I", record[first_at + 8:first_at + 12])[0]
        if count < 1:
            return Checked(False, "a record of no event")
        if record[0] == 2:
            events += count
        else:
            pruned += count
        if record[prev_at:prev_at + 32] != prev:
            return Checked(False, "prev_hash")
        if first <= last_first or obj["index"] <= last_index:
            return Checked(False, "order")
        proof = [b64(h) for h in obj["proof"]]
        if root_from_path(obj["index"], size, leaf(record[1:33]), proof) != root:
            return Checked(False, "inclusion")
        prev, last_first, last_index = record[1:33], first, obj["index"]
    body = b"".join(raw + b"\n" for raw in lines[:-1])
    digest = sha256(body)
    if (end["type"], end["records"], end["session_head"], end["sha256"]) != (
        "end", len(objs) - 3, prev.hex(), digest.hex()
    ):
        return Checked(False, "end line")
    message = (b"palyra.journal.session-proofs.v1\x00" + struct.pack(">I", len(session.encode()))
               + session.encode() + struct.pack(">Q", size) + root + prev
               + struct.pack(">Q", end["records"]) + digest)
    if bytes.fromhex(end.get("public_key", "")) != public_key or not ed25519_ok(
        public_key, bytes.fromhex(end.get("signature", "")), message
    ):
        return Checked(False, "seal")
    return Checked(True, "", size=size, count=end["records"], events=events, pruned=pruned)
