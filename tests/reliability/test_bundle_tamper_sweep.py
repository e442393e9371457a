"""Every single-byte change of an exported bundle is detected (issue 12, reliability suite).

A small real bundle (two sessions, a checkpoint, the exporter's seal) is changed
one byte at a time, at every offset; each variant must fail verification with
the operator's key and without it. (The attacker edits that recompute hashes
are in tests/journal/test_bundle_trust.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from palyra.journal import EventDraft, JournalStore, export_bundle, verify_bundle
from palyra.journal.format.signing import Signer


@pytest.mark.slow
async def test_every_single_byte_change_is_detected(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with JournalStore.open(data_dir) as store:
        for i in range(6):
            await store.append([EventDraft(kind="test.event", actor="tester",
                                           session_id=f"s{i % 2}", run_id="r", tape=True,
                                           payload={"i": i, "note": "é"})])
            if i == 3:
                await store.checkpoint()
    signer = Signer.load(data_dir / "journal")
    assert signer is not None
    key = [signer.public_key]
    original = export_bundle(data_dir, tmp_path / "b.ndjson").path.read_bytes()
    assert verify_bundle(tmp_path / "b.ndjson", trusted_keys=key).ok
    variant = tmp_path / "v.ndjson"
    undetected = []
    for offset in range(len(original)):
        changed = bytearray(original)
        changed[offset] ^= 0x01
        variant.write_bytes(bytes(changed))
        if verify_bundle(variant).ok or verify_bundle(variant, trusted_keys=key).ok:
            undetected.append(offset)
    assert undetected == [], f"{len(undetected)} undetected changes, first at {undetected[:5]}"
