"""A session exported with inclusion proofs: grows with the session, checks offline."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palyra.journal import EventDraft, JournalConfig, JournalStore
from palyra.journal.format.signing import Signer
from palyra.journal.tlog.note import NoteError
from palyra.journal.tlog.session_proofs import MAX_LINE, verify_lines


async def _journal(data_dir: Path, others: int) -> tuple[Path, bytes]:
    """Session ``mine``: 6 records among ``others`` records of other sessions."""
    store = JournalStore.open(data_dir, config=JournalConfig(sync=False))
    try:
        for i in range(others):
            if i % max(1, others // 6) == 0 and i // max(1, others // 6) < 6:
                await store.append([EventDraft("t.mine", "t", session_id="mine", payload={"i": i})])
            await store.append([EventDraft("t.other", "t", session_id=f"o{i % 9}",
                                           payload={"i": i})])  # fmt: skip
        await store.sign_tree()
        out = data_dir.parent / f"{data_dir.name}.proofs"
        assert store.export_session_proofs("mine", out) == 6
    finally:
        store.close()
    return out, Signer.load_or_create(data_dir / "journal").public_key


async def test_it_grows_with_the_session_not_the_journal(tmp_path: Path) -> None:
    small, key_small = await _journal(tmp_path / "small", 12)
    large, key_large = await _journal(tmp_path / "large", 1200)
    assert verify_lines(small.read_bytes(), key_small).records == 6
    proven = verify_lines(large.read_bytes(), key_large)
    assert proven.records == proven.events == 6 and proven.checkpoint.size == 1206
    # 100 times the journal: the file grows by the proofs' extra hashes only (log n).
    assert large.stat().st_size < small.stat().st_size + 6 * 8 * 45


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")[:-1]


def _join(lines: list[bytes]) -> bytes:
    return b"".join(raw + b"\n" for raw in lines)


async def test_leaving_out_changing_or_cutting_records_is_refused(tmp_path: Path) -> None:
    path, key = await _journal(tmp_path / "d", 60)
    lines = _lines(path)
    with pytest.raises(NoteError, match="prev_hash"):  # a record left out of the middle
        verify_lines(_join([*lines[:3], *lines[4:]]), None)
    record = json.loads(lines[3])
    raw = bytearray(base64.b64decode(record["record"]))
    raw[-3] ^= 1  # a payload byte
    record["record"] = base64.b64encode(bytes(raw)).decode()
    changed = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    with pytest.raises(NoteError, match="hash"):
        verify_lines(_join([*lines[:3], changed, *lines[4:]]), None)
    cut = [*lines[:-2], lines[-1]]  # the newest record dropped, the end line kept
    with pytest.raises(NoteError):
        verify_lines(_join(cut), key)
    # ... and the end line recomputed, as anyone can: only the seal (the key) tells.
    body = _join(lines[:-2])
    last = json.loads(lines[-3])
    end = {"type": "end", "records": 5, "sha256": hashlib.sha256(body).hexdigest(),
           "session_head": base64.b64decode(last["record"])[1:33].hex()}
    forged = body + json.dumps(end, sort_keys=True, separators=(",", ":")).encode() + b"\n"
    assert verify_lines(forged, None).records == 5
    with pytest.raises(NoteError, match="seal"):
        verify_lines(forged, key)
    with pytest.raises(NoteError):  # another key: neither the checkpoint nor the seal is its
        verify_lines(path.read_bytes(), Signer(Ed25519PrivateKey.generate()).public_key)
    with pytest.raises(NoteError):
        verify_lines(b'{"type":"header"}\n{}\n{}\n{}\n', None)


async def test_a_file_is_read_a_line_at_a_time_and_no_line_is_unbounded(tmp_path: Path) -> None:
    path, key = await _journal(tmp_path / "d", 60)
    with path.open("rb") as handle:  # the open file, as `verify --bundle` passes it
        assert verify_lines(handle, key).records == 6
    lines = _lines(path)
    huge = lines[3][:-2] + b"A" * MAX_LINE + lines[3][-2:]
    with pytest.raises(NoteError, match="longer than"):
        verify_lines(_join([*lines[:3], huge, *lines[4:]]), None)
    with pytest.raises(NoteError, match="final newline"):
        verify_lines(_join(lines)[:-1], None)
