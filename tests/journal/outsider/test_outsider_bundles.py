"""Tampered bundles: the outsider's verifier and verify_bundle fail at the same position."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from palyra.journal import (
    verify_bundle,
)

from . import verifier as V
from .journals import (
    FIXTURES,
    assert_agree_bad,
    check_bundle,
    edit_line,
    forge,
    hex_flip,
    of_type,
    sub,
)

# -- tampered bundles -----------------------------------------------------------------------

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


def test_respelled_line(fixed: Path, tmp_path: Path) -> None:
    """docs "Verifying": the spelling check is optional, but a version 5 seal signs the
    bytes. A line re-spelled (same values) with a recomputed trailer fails the seal in
    the outsider's verifier and the spelling check in verify_bundle; unsealed, it passes
    the outsider's, not verify_bundle; with the old trailer it fails both."""
    import hashlib

    lines = (fixed / "full.ndjson").read_bytes().splitlines(keepends=True)
    i = next(i for i, ln in enumerate(lines) if json.loads(ln)["type"] == "event")
    lines[i] = lines[i].replace(b'"type":"event"', b'"type": "event"')
    old = tmp_path / "old.ndjson"
    old.write_bytes(b"".join(lines))
    assert not V.verify_bundle_file(old).ok and verify_bundle(old).problem is not None

    def retrailed(kept: list[bytes], name: str) -> Path:
        trailer = json.loads(kept[-1])
        trailer["sha256"] = hashlib.sha256(b"".join(kept[:-1])).hexdigest()
        kept[-1] = json.dumps(trailer, sort_keys=True, separators=(",", ":")).encode() + b"\n"
        (tmp_path / name).write_bytes(b"".join(kept))
        return tmp_path / name

    sealed = retrailed(list(lines), "sealed.ndjson")
    mine = V.verify_bundle_file(sealed)
    assert not mine.ok and "sha256" in (mine.reason or ""), mine
    theirs = verify_bundle(sealed).problem
    assert theirs is not None and "canonical form" in theirs.reason
    unsealed = retrailed([ln for ln in lines if json.loads(ln)["type"] != "seal"],
                         "unsealed.ndjson")
    assert V.verify_bundle_file(unsealed).ok
    theirs = verify_bundle(unsealed).problem
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


