"""The outsider checks the transparency log from the doc alone: proofs and a data dir's tree."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import lmdb
import pytest

from palyra.cli import journal_cmd
from palyra.journal import (
    EventDraft,
    JournalConfig,
    JournalStore,
    NoteError,
    prune_older_than,
    verify_lines,
)
from palyra.journal.format.signing import Signer

from ._tlog import verify_proof_text, verify_session_proofs, verify_tree


async def _journal(data_dir: Path, events: int) -> tuple[list[bytes], bytes]:
    store = JournalStore.open(data_dir, config=JournalConfig(sync=False))
    try:
        for i in range(events):
            drafts = [EventDraft("t.e", "t", session_id=f"s{i % 7}", payload={"i": i, "j": j})
                      for j in range(1 + i % 2)]  # fmt: skip
            await store.append(drafts)
        await store.sign_tree()
        head = store.head().count
        proofs = [store.prove_position(p) for p in (1, head // 2, head)]
    finally:
        store.close()
    return proofs, Signer.load_or_create(data_dir / "journal").public_key


async def test_the_outsider_verifies_proofs_and_refuses_any_flipped_bit(tmp_path: Path) -> None:
    proofs, key = await _journal(tmp_path / "d", 300)
    for proof in proofs:
        checked = verify_proof_text(proof, key)
        assert checked.ok, checked.reason
        assert checked.size >= 300 and checked.count >= 1
    proof = proofs[1]
    head, _sep, _note = proof.partition(b"\n\n")
    extra = len(b"c2sp.org/tlog-proof@v1\nextra ")
    for at in range(extra, len(head), 7):
        if proof[at:at + 1] in b"\n=" or 44 <= at - extra < 88:
            continue  # the record's global link (bytes 33..65): the doc says no proof covers it
        flipped = bytearray(proof)
        flipped[at] = ord("A") if proof[at] != ord("A") else ord("B")
        with contextlib.suppress(ValueError, UnicodeDecodeError):  # undecodable: refused too
            assert not verify_proof_text(bytes(flipped), key).ok, at


async def test_the_outsider_checks_the_stored_tree(tmp_path: Path) -> None:
    await _journal(tmp_path / "d", 600)
    checked = verify_tree(tmp_path / "d")
    assert checked.ok and checked.size > 256, checked.reason
    env = lmdb.open(str(tmp_path / "d" / "journal"), max_dbs=32)
    with env.begin(write=True) as txn:
        db = env.open_db(b"_tlog", txn=txn, create=False)
        key = b"\x00\x00\x00" + (100).to_bytes(8, "big")
        value = bytes(txn.get(key, db=db))
        txn.put(key, bytes([value[0] ^ 1]) + value[1:], db=db)
    env.close()
    checked = verify_tree(tmp_path / "d")
    assert not checked.ok and "entry 100" in checked.reason


async def test_the_outsider_checks_a_session_exported_with_proofs(tmp_path: Path) -> None:
    data_dir = tmp_path / "d"
    store = JournalStore.open(data_dir, config=JournalConfig(sync=False))
    try:
        for i in range(400):
            await store.append([EventDraft("t.e", "t", session_id="mine" if i % 50 == 0
                                           else f"o{i % 5}", payload={"i": i})])  # fmt: skip
        await store.sign_tree()
        store.export_session_proofs("mine", tmp_path / "mine.proofs")
    finally:
        store.close()
    key = Signer.load_or_create(data_dir / "journal").public_key
    data = (tmp_path / "mine.proofs").read_bytes()
    checked = verify_session_proofs(data, key)
    assert checked.ok and checked.count == 8, checked.reason
    lines = data.split(b"\n")
    dropped = b"\n".join([*lines[:4], *lines[5:]])
    assert not verify_session_proofs(dropped, key).ok


async def _session_with_tombstones(data_dir: Path) -> None:
    """Session ``mine``: 10 records among others, its oldest pruned into tombstones."""
    store = JournalStore.open(data_dir, config=JournalConfig(sync=False))
    try:
        for i in range(300):
            session = "mine" if i % 30 == 7 else f"o{i % 4}"
            await store.append([EventDraft("t.e", "t", session_id=session, payload={"i": i})
                                for _ in range(1 + i % 3)])  # fmt: skip
        await prune_older_than(store, 0, through=store.head().count // 3)
    finally:
        store.close()


def test_the_outsider_checks_the_session_export_the_cli_writes(tmp_path: Path) -> None:
    """``palyra journal export --session S`` (the tree signed by the export itself, some of
    the session's records pruned): the outsider accepts exactly what palyra accepts, and
    refuses, like palyra with the key, a change to any one character of any line."""
    data_dir, out = tmp_path / "d", tmp_path / "mine.proofs"
    asyncio.run(_session_with_tombstones(data_dir))
    assert journal_cmd.main(["export", "--data-dir", str(data_dir), "--session", "mine",
                             "--out", str(out)]) == 0  # fmt: skip
    key = Signer.load_or_create(data_dir / "journal").public_key
    data = out.read_bytes()
    ours, theirs = verify_lines(data, key), verify_session_proofs(data, key)
    assert theirs.ok, theirs.reason
    assert (theirs.count, theirs.events) == (ours.records, ours.events)
    assert theirs.count == 10 and theirs.events + theirs.pruned == 20  # 2 events a record
    assert theirs.pruned > 0 and theirs.size == ours.checkpoint.size
    lines = data.split(b"\n")[:-1]
    for number, raw in enumerate(lines):
        for at in sorted({1, len(raw) // 3, len(raw) // 2, len(raw) - 2}):
            changed = bytearray(raw)
            changed[at] = ord("A") if changed[at] != ord("A") else ord("B")
            tampered = b"".join(x + b"\n" for x in [*lines[:number], bytes(changed),
                                                     *lines[number + 1:]])  # fmt: skip
            assert not verify_session_proofs(tampered, key).ok, (number, at)
            with pytest.raises(NoteError):
                verify_lines(tampered, key)
