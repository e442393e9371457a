"""`journal verify` recomputes every compaction's digest from the covered events.

The chain alone proves no stored byte changed; the digest proves a compaction
stands for exactly the events it names. A writer that chains a compaction whose
digest does not match (a summary passed off as covering other events) is
reported at the compaction's position, like any other tampering.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from palyra.core.canonical import canonical_bytes
from palyra.core.tape_digest import TapeDigest, tape_digest
from palyra.journal import EventDraft, JournalStore, export_bundle, verify_bundle, verify_store

from .helpers import rewrite_record

RUN = "01J0000000000000000000RUN1"


def _tape(run_id: str, kind: str, payload: dict[str, Any]) -> EventDraft:
    return EventDraft(kind=kind, actor="system:engine", session_id="S", run_id=run_id,
                      tape=True, payload=payload)


async def _journal(path: Path, *, digest: str | None = None, first: int = 0, last: int = 4,
                   run_id: str = RUN) -> JournalStore:
    store = JournalStore.open(path)
    texts = [_tape(run_id, "tape.user_input", {"text": f"hello {i}", "inputId": str(i)})
             for i in range(5)]
    stored = await store.append(texts)
    await store.append([EventDraft(kind="other.event", actor="x", payload={"n": 1})])
    real = tape_digest((e.tape_seq, e.kind, e.payload) for e in stored[first:last + 1])
    await store.append([_tape(run_id, "tape.session_compaction", {
        "strategy": "session_window_v1", "firstSeq": str(first), "lastSeq": str(last),
        "digestSha256": digest if digest is not None else real, "summary": "- hi"})])
    return store


async def test_a_true_compaction_verifies(tmp_path: Path) -> None:
    store = await _journal(tmp_path)
    try:
        report = verify_store(store)
        assert report.ok, report.summary()
    finally:
        store.close()
    assert verify_store(tmp_path).ok  # read-only, as the CLI does


async def test_a_lying_digest_is_reported_at_the_compaction(tmp_path: Path) -> None:
    store = await _journal(tmp_path, digest="ab" * 32)
    try:
        report = verify_store(store)
    finally:
        store.close()
    assert not report.ok and report.problem is not None
    assert report.problem.position == 7  # 5 inputs, another event, then the compaction
    assert "compaction digest mismatch: tape seqs 0..4" in report.summary()


async def test_a_range_off_the_tape_is_reported(tmp_path: Path) -> None:
    store = await _journal(tmp_path, first=3, last=9)
    try:
        report = verify_store(store)
    finally:
        store.close()
    assert report.problem is not None and report.problem.position == 7
    assert "malformed compaction" in report.summary()


async def test_a_changed_covered_event_is_caught_at_its_own_position(tmp_path: Path) -> None:
    store = await _journal(tmp_path)
    store.close()
    rewrite_record(tmp_path, 3, payload=canonical_bytes({"text": "approved!", "inputId": "2"}))
    report = verify_store(tmp_path)
    assert report.problem is not None and report.problem.position == 1  # the record's first
    assert "record under key 5 (positions 1..5): hash is " in report.summary()


def test_the_digest_layout() -> None:
    """docs/journal/format.md: SHA-256(tag ‖ i64 seq ‖ text(kind) ‖ blob(canonical payload)) per event."""
    import hashlib
    import struct

    payload = {"text": "x", "inputId": "1"}
    body = canonical_bytes(payload)
    want = hashlib.sha256(b"palyra.tape.digest.v1\x00" + struct.pack(">q", 7)
                          + struct.pack(">I", 15) + b"tape.user_input"
                          + struct.pack(">I", len(body)) + body).hexdigest()
    digest = TapeDigest()
    digest.add(7, "tape.user_input", payload)
    assert digest.hexdigest() == want == tape_digest([(7, "tape.user_input", payload)])
    assert body == msgspec.msgpack.encode(payload, order="sorted")


async def test_bundles_check_compaction_digests_too(tmp_path: Path) -> None:
    good = await _journal(tmp_path / "good")
    try:
        export_bundle(good, tmp_path / "good.ndjson")
        export_bundle(good, tmp_path / "session.ndjson", session_id="S")
    finally:
        good.close()
    assert verify_bundle(tmp_path / "good.ndjson").ok
    assert verify_bundle(tmp_path / "session.ndjson").ok
    bad = await _journal(tmp_path / "bad", digest="cd" * 32)
    try:
        export_bundle(bad, tmp_path / "bad.ndjson")
    finally:
        bad.close()
    report = verify_bundle(tmp_path / "bad.ndjson")
    assert report.problem is not None and report.problem.position == 7
    assert "compaction digest mismatch" in report.summary()


async def test_a_compaction_whose_span_retention_pruned_still_verifies(tmp_path: Path) -> None:
    # Retention prunes a prefix: the covered inputs go, the compaction (later) stays.
    # Nothing is left to recompute, so verify passes over the digest; the tombstones
    # and the chain are still checked, and a lying compaction after the cut is still
    # caught wherever its span is kept.
    from palyra.journal import PruneOrder

    store = await _journal(tmp_path)
    try:
        compaction = store.head().count
        await store.append([_tape(RUN, "tape.user_input", {"text": "young", "inputId": "y"})])
        result = await store.prune_batch(PruneOrder(before_ms=10**15, through=5, max_records=100))
        assert result.through >= 5 and store.pruned_through() < compaction
        report = verify_store(store)
        assert report.ok and report.pruned >= 5, report.summary()
        out = tmp_path / "bundle.ndjson"
        export_bundle(store, out)
        checked = verify_bundle(out)
        assert checked.ok and checked.pruned >= 5, checked.summary()
    finally:
        store.close()


async def test_a_lying_compaction_over_a_kept_span_is_caught_after_a_prune(
        tmp_path: Path) -> None:
    from palyra.journal import PruneOrder

    store = JournalStore.open(tmp_path)
    try:
        await store.append([EventDraft(kind="old.event", actor="x", session_id="O",
                                       payload={"n": 0}, ts_ms=1_000)])
        await store.append([EventDraft(kind="old.event", actor="x", session_id="O",
                                       payload={"n": 1}, ts_ms=1_000)])
        await store.prune_batch(PruneOrder(before_ms=10**15, through=1, max_records=10))
        stored = await store.append([_tape(RUN, "tape.user_input", {"text": f"t{i}"})
                                     for i in range(3)])
        assert stored[0].tape_seq == 0
        await store.append([_tape(RUN, "tape.session_compaction", {
            "strategy": "session_window_v1", "firstSeq": "0", "lastSeq": "2",
            "digestSha256": "ab" * 32, "summary": "- hi"})])
        report = verify_store(store)
        assert not report.ok and "compaction digest mismatch" in report.summary()
        out = tmp_path / "bundle.ndjson"
        export_bundle(store, out)
        assert "compaction digest mismatch" in verify_bundle(out).summary()
    finally:
        store.close()
