"""``palyra journal prove|verify-proof|consistency`` on a data dir with no daemon."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from palyra.cli import journal_cmd
from palyra.journal import EventDraft, JournalStore
from palyra.journal.format.signing import Signer


async def _fill(data_dir: Path, count: int) -> None:
    store = JournalStore.open(data_dir)
    try:
        for i in range(count):
            await store.append([EventDraft("t.e", "t", session_id="s", run_id="r", tape=True,
                                           payload={"i": i})])  # fmt: skip
    finally:
        store.close()


def test_prove_signs_when_no_checkpoint_covers_the_record_then_checks_offline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = tmp_path / "data"
    asyncio.run(_fill(data_dir, 5))
    key = Signer.load_or_create(data_dir / "journal").public_key.hex()
    proof = tmp_path / "p.tlog-proof"
    # No checkpoint yet and no daemon: prove signs one on the data dir, then proves.
    assert journal_cmd.main(["prove", "--run", "r", "--seq", "2", "--data-dir", str(data_dir),
                             "--out", str(proof)]) == 0  # fmt: skip
    assert journal_cmd.main(["verify-proof", str(proof), "--public-key", key]) == 0
    out = capsys.readouterr().out
    assert "position=3 kind=t.e" in out and "tape_seq=2" in out
    first = tmp_path / "first.checkpoint"
    first.write_bytes(proof.read_bytes().partition(b"\n\n")[2])
    asyncio.run(_fill(data_dir, 3))
    later = tmp_path / "later.tlog-proof"
    assert journal_cmd.main(["prove", "--position", "8", "--data-dir", str(data_dir),
                             "--out", str(later)]) == 0  # fmt: skip
    second = tmp_path / "second.checkpoint"
    second.write_bytes(later.read_bytes().partition(b"\n\n")[2])
    assert journal_cmd.main(["consistency", str(first), str(second), "--public-key", key,
                             "--data-dir", str(data_dir)]) == 0  # fmt: skip
    assert journal_cmd.main(["consistency", str(second), str(first), "--public-key", key,
                             "--data-dir", str(data_dir)]) == 1  # fmt: skip
    assert journal_cmd.main(["prove", "--position", "99", "--data-dir", str(data_dir)]) == 2
    tampered = proof.read_bytes().replace(b"index 2", b"index 1")
    proof.write_bytes(tampered)
    assert journal_cmd.main(["verify-proof", str(proof), "--public-key", key]) == 1
