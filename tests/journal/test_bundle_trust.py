"""The campaign's attacks on exported bundles, with and without the operator's key (issue 12, 1-2).

An attacker who holds a bundle but not the signing key can recompute every
unkeyed hash. So without a key, verification proves integrity only and says so;
with the operator's key it must prove the content is what the exporter signed:
the checkpoints' coverage is reported, and the exporter's seal must cover the
bundle's end and, for a session bundle, the session's full event count.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from palyra.core.canonical import canonical_bytes, normalize
from palyra.core.chain import GENESIS, event_hash, link_hash
from palyra.core.event_header import header_values
from palyra.journal import JournalStore, export_bundle, verify_bundle, verify_store
from palyra.journal.format.bundle_format import EventLine, TrailerLine, decode_line, encode_line
from palyra.journal.format.record import RECORD_VERSION, EventRecord
from palyra.journal.format.signing import Signer

from .helpers import draft


async def _fill(data_dir: Path, events: int = 30, checkpoint_at: tuple[int, ...] = (10, 20)) -> None:
    async with JournalStore.open(data_dir) as store:
        for i in range(events):
            await store.append([draft(i, session_id=f"s{i % 3}", run_id=f"r{i % 2}", tape=True,
                                      payload={"i": i})])
            if i + 1 in checkpoint_at:
                await store.checkpoint()


def _key(data_dir: Path) -> bytes:
    signer = Signer.load(data_dir / "journal")
    assert signer is not None
    return signer.public_key


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _rechain(rows: list[dict[str, Any]], out: Path) -> None:
    """Recompute every unkeyed hash and the trailer: what a keyless attacker can do."""
    lines: list[bytes] = []
    head, heads = GENESIS, {}
    last_position = 0
    for row in rows:
        kind = row["type"]
        if kind in ("checkpoint", "seal", "trailer"):
            continue  # signatures cannot be forged; drop them
        if kind == "event":
            line = decode_line(json.dumps(row, sort_keys=True, separators=(",", ":")).encode())
            assert isinstance(line, EventLine)
            prev = heads.get(line.session_id, GENESIS)
            record = EventRecord(*header_values(line), v=RECORD_VERSION,
                                 payload=canonical_bytes(normalize(line.payload)),
                                 redactions=line.redactions, prev_hash=prev, hash=GENESIS,
                                 global_hash=GENESIS)
            digest = event_hash(prev, record, record.redactions, record.payload)
            heads[line.session_id] = digest
            head = link_hash(head, line.position, digest)
            row = {**row, "prev_hash": prev.hex(), "hash": digest.hex(), "global_hash": head.hex()}
            last_position = line.position
        elif kind == "link":
            head = link_hash(head, row["position"], bytes.fromhex(row["hash"]))
            row = {**row, "global_hash": head.hex()}
            last_position = row["position"]
        lines.append(json.dumps(row, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    digest = hashlib.sha256(b"".join(lines)).hexdigest()
    header = json.loads(lines[0])
    session = header["session_id"] or None
    events = sum(1 for raw in lines if json.loads(raw)["type"] == "event")
    links = sum(1 for raw in lines if json.loads(raw)["type"] == "link")
    trailer = TrailerLine(events=events, links=links, checkpoints=0, head_position=last_position,
                          head_hash=head.hex(),
                          session_head=heads.get(session, GENESIS).hex() if session else "",
                          sha256=digest)
    out.write_bytes(b"".join(lines) + encode_line(trailer))


async def test_an_honest_export_is_sealed_and_fully_signed(data_dir: Path, tmp_path: Path) -> None:
    await _fill(data_dir)
    out = export_bundle(data_dir, tmp_path / "b.ndjson").path
    report = verify_bundle(out, trusted_keys=[_key(data_dir)])
    assert report.ok and report.sealed and report.signed_through == report.head_position == 30
    assert "signed through position 30 of 30, sealed by the exporter" in report.summary()
    unkeyed = verify_bundle(out)
    assert unkeyed.ok and "neither authenticity nor completeness is verified" in unkeyed.summary()


async def test_a_rewritten_rechained_bundle_fails_with_the_key(data_dir: Path,
                                                              tmp_path: Path) -> None:
    await _fill(data_dir)
    rows = _rows(export_bundle(data_dir, tmp_path / "b.ndjson").path)
    forged = tmp_path / "forged.ndjson"
    i = next(k for k, r in enumerate(rows) if r["type"] == "event" and r["position"] == 7)
    rows[i] = {**rows[i], "payload": {"i": "rewritten"}}
    _rechain(rows, forged)
    assert verify_bundle(forged).ok  # integrity alone cannot tell
    report = verify_bundle(forged, trusted_keys=[_key(data_dir)])
    assert not report.ok and "signed through position 0 of 30" in report.summary()


@pytest.mark.parametrize("keep", [20, 25])
async def test_a_bundle_cut_short_fails_with_the_key(data_dir: Path, tmp_path: Path,
                                                     keep: int) -> None:
    await _fill(data_dir)
    rows = _rows(export_bundle(data_dir, tmp_path / "b.ndjson").path)
    prefix = [r for r in rows if r["type"] not in ("seal", "trailer")
              and r.get("position", 0) <= keep]
    cut = tmp_path / "cut.ndjson"
    _rechain(prefix, cut)
    report = verify_bundle(cut, trusted_keys=[_key(data_dir)])
    assert not report.ok and "no seal by a trusted key" in report.summary()


async def test_an_empty_bundle_fails_with_the_key(data_dir: Path, tmp_path: Path) -> None:
    await _fill(data_dir)
    rows = _rows(export_bundle(data_dir, tmp_path / "b.ndjson").path)
    empty = tmp_path / "empty.ndjson"
    _rechain(rows[:1], empty)
    assert verify_bundle(empty).ok
    assert not verify_bundle(empty, trusted_keys=[_key(data_dir)]).ok


@pytest.mark.parametrize("hidden", [1, 5])
async def test_session_events_turned_into_links_fail_with_the_key(
    data_dir: Path, tmp_path: Path, hidden: int
) -> None:
    await _fill(data_dir)
    rows = _rows(export_bundle(data_dir, tmp_path / "s.ndjson", session_id="s1").path)
    mine = [k for k, r in enumerate(rows) if r["type"] == "event"]
    for k in mine[-hidden:]:  # the newest events of the session become bare links
        rows[k] = {"type": "link", "position": rows[k]["position"], "hash": rows[k]["hash"],
                   "global_hash": rows[k]["global_hash"]}
    key = _key(data_dir)
    # Keeping the real seal: it names the session's true event count and head.
    with_seal = tmp_path / "with-seal.ndjson"
    body = [r for r in rows if r["type"] != "trailer"]
    _rechain([r for r in body if r["type"] != "seal"], with_seal)
    lines = with_seal.read_text().splitlines()
    seal = next(r for r in rows if r["type"] == "seal")
    lines.insert(-1, json.dumps(seal, sort_keys=True, separators=(",", ":")))
    # (the trailer digest no longer matches either; the seal check comes first)
    with_seal.write_text("\n".join(lines) + "\n")
    report = verify_bundle(with_seal, trusted_keys=[key])
    assert not report.ok
    # Dropping the seal instead: the key then finds no seal at all.
    without = tmp_path / "without-seal.ndjson"
    _rechain([r for r in body if r["type"] != "seal"], without)
    assert verify_bundle(without).ok  # completeness is unprovable without the key...
    assert "neither authenticity nor completeness" in verify_bundle(without).summary()
    report = verify_bundle(without, trusted_keys=[key])  # ...and with it, refused
    assert not report.ok and "no seal by a trusted key" in report.summary()


async def test_a_data_dir_must_be_signed_to_its_head_with_the_key(data_dir: Path) -> None:
    await _fill(data_dir, checkpoint_at=(10, 20))
    key = _key(data_dir)
    report = verify_store(data_dir, trusted_keys=[key])
    assert not report.ok and "signed through position 20 of 30" in report.summary()
    async with JournalStore.open(data_dir) as store:
        await store.checkpoint()
    report = verify_store(data_dir, trusted_keys=[key])
    assert report.ok and "signed through position 30 of 30" in report.summary()
