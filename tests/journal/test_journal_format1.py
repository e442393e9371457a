"""Journals and bundles written before format 2 still read, verify, export and grow.

``tests/fixtures/journal_v1/`` holds what the format 1 code wrote (commit
76d1736): a data dir with 24 events in 12 calls over 3 sessions and 2 runs,
3 checkpoints, redacted payloads; and a full and a session bundle of it.
"""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pytest

from palyra.journal import JournalStore, export_bundle, verify_bundle, verify_store
from palyra.journal.format.signing import Signer

from .helpers import draft, raw_record

FIXTURES = Path(__file__).parents[1] / "fixtures" / "journal_v1"
HEAD = "f5009770fe7c335a43abaf68bf13d39a3483fe5d9b37b41f5de65efa837b4241"


def _public_key(data_dir: Path) -> bytes:
    return Signer.load_or_create(data_dir / "journal").public_key


@pytest.fixture
def v1_dir(tmp_path: Path) -> Path:
    with tarfile.open(FIXTURES / "journal-v1.tar.gz") as archive:
        archive.extractall(tmp_path / "data", filter="data")
    return tmp_path / "data"


def test_format1_journal_verifies_and_reads(v1_dir: Path) -> None:
    report = verify_store(v1_dir)
    assert report.summary().startswith(f"OK events=24 checkpoints=3 head_position=24 head={HEAD}")
    keyed = verify_store(v1_dir, trusted_keys=[_public_key(v1_dir)])
    assert keyed.ok and keyed.signed_through == 24
    assert raw_record(v1_dir, 5)[0] == 0xDE  # format 1 records indeed
    with JournalStore.open(v1_dir) as store:
        events = store.read_range(0, 100)
        assert [e.position for e in events] == list(range(1, 25))
        assert events[0].payload == {
            "f": 0.0, "i": 0, "password": "<redacted>", "t": "é✓",
        }  # fmt: skip
        assert events[0].redactions == ["$.password"]
        assert [e.tape_seq for e in store.read_tape("r1", -1, 100).events] == list(range(6))
        assert [e.position for e in store.read_session("s1", 10, 3)] == [15, 16, 21]
        assert store.head().head_hash == HEAD


async def test_format1_journal_grows_in_format2(v1_dir: Path, tmp_path: Path) -> None:
    async with JournalStore.open(v1_dir) as store:
        old = store.read_session("s1", 0, 100)
        new = await store.append(
            [draft(i, session_id="s1", run_id="r1", tape=True) for i in range(3)]
        )
        assert [e.tape_seq for e in new] == [6, 7, 8]
        assert new[0].prev_hash == old[-1].hash  # the session chain crosses formats
        await store.checkpoint()
        assert store.stats().records == 1
    key = _public_key(v1_dir)
    report = verify_store(v1_dir, trusted_keys=[key])
    assert report.ok and report.events == 27 and report.checkpoints == 4
    for session in (None, "s1", "s2"):
        out = tmp_path / f"{session}.ndjson"
        export_bundle(v1_dir, out, session_id=session)
        sealed = verify_bundle(out, trusted_keys=[key])
        assert sealed.ok and sealed.sealed and sealed.signed_through == 27, session


@pytest.mark.parametrize("name", ["full-v1.ndjson", "s1-v1.ndjson"])
def test_version1_bundles_still_verify(name: str, tmp_path: Path) -> None:
    report = verify_bundle(FIXTURES / name)
    assert report.ok and report.head_hash == HEAD
    # One changed byte still fails them.
    data = bytearray((FIXTURES / name).read_bytes())
    at = data.index(b'"i":4')
    data[at + 4] = ord("5")
    shutil.copy(FIXTURES / name, tmp_path / name)
    (tmp_path / name).write_bytes(bytes(data))
    assert not verify_bundle(tmp_path / name).ok


def test_tampered_format1_record_is_still_caught(v1_dir: Path) -> None:
    raw = bytearray(raw_record(v1_dir, 7))
    at = raw.index(b"run_engine")
    raw[at] = ord("R")
    raw_record(v1_dir, 7, bytes(raw))
    report = verify_store(v1_dir)
    assert report.problem is not None and report.problem.position == 7
