"""Every field a bundle verifier uses is covered by a hash or by the seal (issue 35, items 3-4).

A keyless attacker may rewrite any line and recompute the trailer, but not re-sign the
seal. Fields no hash covers (a tombstone's ``session_id`` and ``prev_hash``, which
positions are link lines and which are own tombstones, the header's export time) were
open to that under the trusted key; from version 5 the seal signs the SHA-256 of every
line before it, so the journal's verifier and the outsider's (written from the format
doc) both refuse each rewrite with the key. And a line with a forged duplicate
``payload`` key before the genuine one is refused by both, key or not (the doc makes
rejecting duplicate keys mandatory).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from palyra.journal import verify_bundle
from palyra.journal.format.signing import Signer

from . import verifier as V
from .journals import forge

Rows = list[dict[str, Any]]
GENESIS = "0" * 64


def _rename_tombstone(rows: Rows) -> None:
    # A tombstone that is its session's last record: moving it to a session of its own
    # (first record there, so prev_hash GENESIS) breaks no hash, as no hash covers either.
    last_of: dict[str, int] = {}
    for i, o in enumerate(rows):
        if o["type"] in ("event", "pruned"):
            last_of[o["session_id"]] = i
    tomb = next(o for i, o in enumerate(rows)
                if o["type"] == "pruned" and last_of[o["session_id"]] == i)
    tomb["session_id"], tomb["prev_hash"] = "elsewhere", GENESIS


def _tombstones_to_links(rows: Rows) -> None:
    out: Rows = []
    for o in rows:
        if o["type"] == "pruned":
            out += [{"type": "link", "position": p, "hash": o["hash"],
                     "global_hash": o["global_hash"]} for p in range(o["position"], o["last"] + 1)]
        else:
            out.append(o)
    rows[:] = out


def _links_to_tombstone(rows: Rows) -> None:
    i = next(i for i, o in enumerate(rows) if o["type"] == "link")
    link = rows[i]
    run = [o for o in rows[i:] if o["type"] == "link" and o["hash"] == link["hash"]]
    session = next(o["session_id"] for o in rows if o["type"] in ("event", "pruned"))
    rows[i:i + len(run)] = [{"type": "pruned", "position": link["position"],
                             "last": run[-1]["position"], "session_id": session,
                             "prev_hash": GENESIS, "hash": link["hash"],
                             "global_hash": link["global_hash"]}]


def _export_time(rows: Rows) -> None:
    rows[0]["exported_at_ms"] += 86_400_000


ATTACKS: dict[str, tuple[str, Callable[[Rows], None]]] = {
    "tombstone session_id and prev_hash": ("full.ndjson", _rename_tombstone),
    "own tombstones turned into links": ("session-2.ndjson", _tombstones_to_links),
    "foreign links claimed as an own tombstone": ("session-1.ndjson", _links_to_tombstone),
    "header export time": ("full.ndjson", _export_time),
}


def _key(fixed: Path) -> bytes:
    signer = Signer.load(fixed / "data" / "journal")
    assert signer is not None
    return signer.public_key


@pytest.mark.parametrize("name", list(ATTACKS))
def test_uncovered_fields_are_sealed(fixed: Path, tmp_path: Path, name: str) -> None:
    source, attack = ATTACKS[name]
    original = fixed / source
    assert any(json.loads(ln)["type"] == "pruned" for ln in original.read_bytes().splitlines())
    bundle = forge(original, tmp_path / "forged.ndjson", attack)
    assert bundle.read_bytes() != original.read_bytes()
    key = _key(fixed)
    theirs = verify_bundle(bundle, trusted_keys=[key])
    assert theirs.problem is not None, f"{name}: the journal accepted it under the trusted key"
    assert not V.verify_bundle_file(bundle, [key]).ok, f"{name}: the outsider accepted it"
    assert verify_bundle(original, trusted_keys=[key]).problem is None
    assert V.verify_bundle_file(original, [key]).ok


def test_a_forged_duplicate_payload_key_is_refused(fixed: Path, tmp_path: Path) -> None:
    lines = (fixed / "full.ndjson").read_bytes().splitlines(keepends=True)
    i = next(i for i, ln in enumerate(lines) if json.loads(ln)["type"] == "event")
    lines[i] = lines[i].replace(b'"payload":', b'"payload":{"forged":true},"payload":', 1)
    # Unsealed, with a recomputed trailer: only the duplicate itself can give it away.
    kept = [ln for ln in lines if json.loads(ln)["type"] != "seal"]
    import hashlib

    trailer = json.loads(kept[-1])
    trailer["sha256"] = hashlib.sha256(b"".join(kept[:-1])).hexdigest()
    kept[-1] = json.dumps(trailer, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    bundle = tmp_path / "dup.ndjson"
    bundle.write_bytes(b"".join(kept))
    assert verify_bundle(bundle).problem is not None
    mine = V.verify_bundle_file(bundle)
    assert not mine.ok and "duplicate key" in (mine.reason or ""), mine


def _set(kind: str, **values: Any) -> Callable[[Rows], None]:
    def edit(rows: Rows) -> None:
        next(o for o in rows if o["type"] == kind).update(values)
    return edit


MESSAGES: dict[str, tuple[Callable[[Rows], None], str]] = {
    "full bundle naming a session": (_set("header", session_id="s1"),
                                     "line 1 (header): session_id is 's1', expected ''"),
    "unknown scope": (_set("header", scope="galaxy"),
                      "line 1 (header): scope is 'galaxy', expected 'full' or 'session'"),
    "seal head at the right position": (_set("seal", head_hash="ab" * 32),
                                        "(seal): head_hash is " + "ab" * 32 + ", expected"),
    "trailer count": (lambda rows: rows[-1].update(events=rows[-1]["events"] + 1),
                      "(trailer): events is"),
}


@pytest.mark.parametrize("name", list(MESSAGES))
def test_verify_failures_name_line_field_and_expectation(fixed: Path, tmp_path: Path,
                                                         name: str) -> None:
    """Issue 35 item 10: no "unknown bundle scope 'full'", no "the seal covers up to
    position 22, the bundle to 22"."""
    edit, expected = MESSAGES[name]
    bundle = forge(fixed / "full.ndjson", tmp_path / "b.ndjson", edit)
    problem = verify_bundle(bundle).problem
    assert problem is not None and expected in problem.reason, problem


def test_a_seal_digest_that_is_not_hex_is_judged_alike(fixed: Path, tmp_path: Path) -> None:
    """Found by the random-journal comparison: a seal ``sha256`` with a non-hex digit was
    a malformed line (a position) to the outsider, a digest mismatch (none) to ours. The
    doc now says the seal's hex is checked against what it covers: no position."""
    bundle = forge(fixed / "full.ndjson", tmp_path / "b.ndjson",
                   _set("seal", sha256="g" + "0" * 63))
    ours = verify_bundle(bundle).problem
    theirs = V.verify_bundle_file(bundle)
    assert ours is not None and not theirs.ok
    assert ours.position is None and theirs.position is None, (ours, theirs)
    assert "(seal): sha256 is g000" in ours.reason
