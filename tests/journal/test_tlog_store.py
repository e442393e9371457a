"""The journal's transparency log end to end: tree rows, signed checkpoints, proofs, tiles."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal import JournalConfig, JournalStore, prune_older_than, sign_tree_every
from palyra.journal._env import EVENTS, TLOG, TLOG_CHECKPOINTS, journal_dir
from palyra.journal.format.record import record_hashes
from palyra.journal.format.signing import Signer
from palyra.journal.read.tlog import JOURNAL_TREE, StoredTree
from palyra.journal.tlog.merkle import (
    MemoryTree,
    leaf_hash,
    node_key,
    root_at,
    tree_prefix,
    verify_consistency,
)
from palyra.journal.tlog.note import (
    NoteError,
    Witness,
    cosignature_line,
    cosignature_message,
    parse_checkpoint,
    parse_note,
    verify_checkpoint,
)
from palyra.journal.tlog.proof import verify_proof
from palyra.journal.verify.verify import verify_store

from .helpers import draft


def _records(store: JournalStore) -> list[tuple[bytes, int]]:
    """(record_hash, last) of every stored record, read through the store's own
    environment (LMDB or PostgreSQL) rather than its tree."""
    env = store.env
    with env.read() as txn:
        cursor = txn.cursor(db=env.dbs[EVENTS])
        found, records = cursor.first(), []
        while found:
            records.append((record_hashes(bytes(cursor.value()))[0],
                            int.from_bytes(bytes(cursor.key()), "big")))
            found = cursor.next()
    return records


async def _fill(store: JournalStore, count: int, sessions: int = 3) -> None:
    for i in range(count):
        await store.append([draft(i, session_id=f"s{i % sessions}")])


async def test_the_tree_is_the_records_and_a_signed_checkpoint_names_its_root(
    store: JournalStore, data_dir: Path
) -> None:
    await _fill(store, 20)
    await store.append([draft(100 + i, session_id="s9") for i in range(5)])  # one record of 5
    note = await store.sign_tree()
    public_key = Signer.load_or_create(journal_dir(data_dir)).public_key
    _note, checkpoint = verify_checkpoint(note, None, public_key)
    records = _records(store)
    tree = MemoryTree([leaf_hash(h) for h, _last in records])
    assert checkpoint.size == len(records) == 21
    assert checkpoint.root == root_at(tree.size, tree.hash_at)


async def test_a_proof_verifies_offline_and_names_the_record(
    store: JournalStore, data_dir: Path
) -> None:
    await _fill(store, 40)
    await store.sign_tree()
    public_key = Signer.load_or_create(journal_dir(data_dir)).public_key
    for position in (1, 17, 40):
        proven = verify_proof(store.prove_position(position), public_key)
        first = int.from_bytes(proven.record[122:130], "big")
        assert first == position  # one event per record here
        assert proven.checkpoint.size == 40
    with pytest.raises(NoteError):  # another key: the checkpoint is not the log's
        verify_proof(store.prove_position(3), Signer(Ed25519PrivateKey.generate()).public_key)


async def test_a_position_newer_than_the_signed_checkpoint_is_not_proven(
    store: JournalStore,
) -> None:
    await _fill(store, 3)
    await store.sign_tree()
    await _fill(store, 1)
    with pytest.raises(PalyraError) as raised:
        store.prove_position(4)
    assert raised.value.code is ErrorCode.NOT_FOUND
    await store.sign_tree()
    assert store.prove_position(4)


async def test_signing_again_without_growth_changes_nothing_and_growth_stays_consistent(
    store: JournalStore,
) -> None:
    await _fill(store, 5)
    first = await store.sign_tree()
    assert await store.sign_tree() == first
    await _fill(store, 7)
    second = await store.sign_tree()
    old = parse_checkpoint(parse_note(first).body)
    new = parse_checkpoint(parse_note(second).body)
    assert (old.size, new.size) == (5, 12)
    assert verify_consistency(5, 12, old.root, new.root, store.consistency(5, 12))


async def test_a_log_keeps_the_origin_it_was_first_signed_under(
    store: JournalStore, data_dir: Path
) -> None:
    """A data dir signed under the old default origin (or any) keeps it when signed with
    none configured: verifiers and witnesses pin a log's origin, and the log must not
    sign under two names. A new log gets the short default."""
    public_key = Signer.load_or_create(journal_dir(data_dir)).public_key
    old_default = "palyra.local/journal/" + hashlib.sha256(public_key).hexdigest()[:16]
    await _fill(store, 3)
    await store.sign_tree(old_default)
    await _fill(store, 2)
    note = await store.sign_tree()
    _note, checkpoint = verify_checkpoint(note, old_default, public_key)
    assert checkpoint.size == 5


async def test_a_new_log_is_named_by_its_key_under_the_short_default(
    store: JournalStore, data_dir: Path
) -> None:
    public_key = Signer.load_or_create(journal_dir(data_dir)).public_key
    await _fill(store, 2)
    _note, checkpoint = verify_checkpoint(await store.sign_tree(), None, public_key)
    assert checkpoint.origin == "palyra.local/" + hashlib.sha256(public_key).hexdigest()[:16]


async def test_the_log_refuses_to_sign_a_tree_that_does_not_extend_the_signed_one(
    data_dir: Path,
) -> None:
    """Rewrite a stored entry under the signed checkpoint: the next signing must refuse."""
    store = JournalStore.open(data_dir, config=JournalConfig(sync=True))
    await _fill(store, 9)
    await store.sign_tree()
    store.close()
    env = lmdb.open(str(journal_dir(data_dir)), max_dbs=32)
    with env.begin(write=True) as txn:
        db = env.open_db(TLOG.encode(), txn=txn, create=False)
        cursor = txn.cursor(db=db)
        assert cursor.first()
        key, value = cursor.key(), bytes(cursor.value())
        txn.put(key, bytes([value[0] ^ 1]) + value[1:], db=db)
    env.close()
    store = JournalStore.open(data_dir, config=JournalConfig(sync=True))
    try:
        await _fill(store, 2)
        before = store.tree_checkpoint()
        with pytest.raises(PalyraError) as raised:
            await store.sign_tree()
        assert raised.value.code is ErrorCode.JOURNAL_CORRUPT
        assert store.tree_checkpoint() == before  # nothing was signed
    finally:
        store.close()


async def test_tiles_and_entry_bundles_follow_tlog_tiles(store: JournalStore, data_dir: Path) -> None:
    await _fill(store, 300, sessions=7)
    full = store.tile(0, 0, 256)
    partial = store.tile(0, 1, 300 - 256)
    level1 = store.tile(1, 0, 1)
    bundle = store.tile(-1, 1, 300 - 256)
    records = _records(store)
    leaves = [leaf_hash(h) for h, _last in records]
    assert full == b"".join(leaves[:256]) and partial == b"".join(leaves[256:])
    assert level1 == root_at(256, MemoryTree(leaves[:256]).hash_at)
    assert bundle == b"".join(b"\x00\x20" + h for h, _last in records[256:])


async def test_a_journal_older_than_the_tree_gets_it_when_a_writer_opens_it(data_dir: Path) -> None:
    store = JournalStore.open(data_dir, config=JournalConfig(sync=True))
    await _fill(store, 30)
    store.close()
    env = lmdb.open(str(journal_dir(data_dir)), max_dbs=32)  # drop the tree: an older journal
    with env.begin(write=True) as txn:
        txn.drop(env.open_db(TLOG.encode(), txn=txn, create=False), delete=False)
    env.close()
    store = JournalStore.open(data_dir, config=JournalConfig(sync=True))
    try:
        assert store.tree_size() == 30
        await _fill(store, 2)
        note = await store.sign_tree()
        tree = MemoryTree([leaf_hash(h) for h, _last in _records(store)])
    finally:
        store.close()
    checkpoint = parse_checkpoint(parse_note(note).body)
    assert checkpoint.size == 32 and checkpoint.root == root_at(32, tree.hash_at)
    assert base64.b64encode(checkpoint.root).decode() in note.decode()


async def test_verify_checks_the_tree_against_the_chain(data_dir: Path) -> None:
    store = JournalStore.open(data_dir, config=JournalConfig(sync=True))
    await _fill(store, 300, sessions=5)
    await store.sign_tree()
    store.close()
    assert verify_store(data_dir).ok
    env = lmdb.open(str(journal_dir(data_dir)), max_dbs=32)
    with env.begin(write=True) as txn:  # flip one bit of the level-8 node (a full tile's root)
        db = env.open_db(TLOG.encode(), txn=txn, create=False)
        cursor = txn.cursor(db=db)
        assert cursor.last()
        key, value = cursor.key(), bytes(cursor.value())
        assert len(value) == 32  # the level-8 row, not an entry
        txn.put(key, value[:-1] + bytes([value[-1] ^ 0x80]), db=db)
    env.close()
    report = verify_store(data_dir)
    assert not report.ok and "transparency log" in report.summary()


@pytest.mark.parametrize("entry", [0, 137, 299])
async def test_verify_names_the_first_entry_the_tree_holds_wrongly(data_dir: Path, entry: int
                                                                  ) -> None:
    store = JournalStore.open(data_dir, config=JournalConfig(sync=True))
    await _fill(store, 300, sessions=5)
    await store.sign_tree()
    store.close()
    env = lmdb.open(str(journal_dir(data_dir)), max_dbs=32)
    with env.begin(write=True) as txn:  # flip one bit of one entry's leaf row (level 0)
        db = env.open_db(TLOG.encode(), txn=txn, create=False)
        cursor = txn.cursor(db=db)
        rows = [(bytes(k), bytes(v)) for k, v in cursor if len(v) == 40]
        key, value = rows[entry]
        txn.put(key, bytes([value[0] ^ 0x01]) + value[1:], db=db)
    env.close()
    report = verify_store(data_dir)
    assert not report.ok
    assert f"tree entry {entry} (or a node above it) does not match" in report.summary()


async def _signed_journal(data_dir: Path, count: int) -> bytes:
    """A closed journal of ``count`` appends over 5 sessions with a signed tree; its note."""
    store = JournalStore.open(data_dir, config=JournalConfig(sync=True))
    await _fill(store, count, sessions=5)
    note = await store.sign_tree()
    store.close()
    return note


def _rewrite_tlog(data_dir: Path, edit: Callable[[Any, Any, Any], None]) -> None:
    """``edit(txn, tree db, checkpoints db)`` in one write transaction of the data dir."""
    env = lmdb.open(str(journal_dir(data_dir)), max_dbs=32)
    with env.begin(write=True) as txn:
        edit(txn, env.open_db(TLOG.encode(), txn=txn, create=False),
             env.open_db(TLOG_CHECKPOINTS.encode(), txn=txn, create=False))
    env.close()


async def test_verify_refuses_a_signed_root_the_records_do_not_give(data_dir: Path) -> None:
    note = await _signed_journal(data_dir, 40)
    checkpoint = parse_checkpoint(parse_note(note).body)
    other = base64.b64encode(hashlib.sha256(checkpoint.root).digest())
    forged = note.replace(base64.b64encode(checkpoint.root), other)
    assert forged != note
    _rewrite_tlog(data_dir, lambda txn, _tree, notes: txn.put(
        StoredTree.key_of(), forged, db=notes))
    report = verify_store(data_dir)
    assert not report.ok
    assert (f"the signed checkpoint's root at size {checkpoint.size} is not the root"
            in report.summary())


async def test_verify_refuses_a_tree_longer_than_the_journal(data_dir: Path) -> None:
    await _signed_journal(data_dir, 30)
    size = len(_records_of(data_dir))

    def one_more(txn: Any, tree: Any, _notes: Any) -> None:
        txn.put(node_key(tree_prefix(JOURNAL_TREE), 0, size), bytes(40), db=tree)

    _rewrite_tlog(data_dir, one_more)
    report = verify_store(data_dir)
    assert not report.ok
    assert f"the tree holds {size + 1} entries, the journal {size} records" in report.summary()


async def test_verify_refuses_a_signed_size_beyond_the_records(data_dir: Path) -> None:
    note = await _signed_journal(data_dir, 30)
    checkpoint = parse_checkpoint(parse_note(note).body)
    size = checkpoint.size
    forged = note.replace(f"\n{size}\n".encode(), f"\n{size + 7}\n".encode(), 1)
    assert forged != note
    _rewrite_tlog(data_dir, lambda txn, _tree, notes: txn.put(
        StoredTree.key_of(), forged, db=notes))
    report = verify_store(data_dir)
    assert not report.ok
    assert f"the signed checkpoint of size {size + 7} is beyond the {size} records" in (
        report.summary())


async def test_verify_refuses_entries_moved_up_past_a_gap(data_dir: Path) -> None:
    """Every entry from 17 on re-keyed one index up: the values still come in order."""
    await _signed_journal(data_dir, 40)
    prefix = tree_prefix(JOURNAL_TREE)

    def gap_at_17(txn: Any, tree: Any, _notes: Any) -> None:
        cursor = txn.cursor(db=tree)
        rows = [(bytes(k), bytes(v)) for k, v in cursor if len(v) == 40]
        for index in range(len(rows) - 1, 16, -1):
            txn.delete(rows[index][0], db=tree)
            txn.put(node_key(prefix, 0, index + 1), rows[index][1], db=tree)

    _rewrite_tlog(data_dir, gap_at_17)
    report = verify_store(data_dir)
    assert not report.ok
    assert "tree entry 17 (or a node above it) does not match" in report.summary()


def _records_of(data_dir: Path) -> list[tuple[bytes, int]]:
    with JournalStore.open(data_dir, config=JournalConfig(readonly=True)) as store:
        return _records(store)


async def test_tiles_past_the_tree_are_not_found(store: JournalStore) -> None:
    await _fill(store, 10)
    for level, index, width in ((0, 1, 256), (0, 1000, 256), (0, 0, 11), (1, 0, 1), (-1, 0, 11)):
        with pytest.raises(PalyraError) as raised:
            store.tile(level, index, width)
        assert raised.value.code is ErrorCode.NOT_FOUND
    assert len(store.tile(0, 0, 10)) == 320


async def test_witness_cosignatures_are_stored_served_and_counted_by_proofs(
    store: JournalStore, data_dir: Path
) -> None:
    await _fill(store, 6)
    note = await store.sign_tree()
    w_key = Ed25519PrivateKey.generate()
    witness = Witness("witness.example/w1", Signer(w_key).public_key)
    body = parse_note(note).body
    cosigned = note + cosignature_line(witness, 1_700_000_000,
                                       w_key.sign(cosignature_message(body, 1_700_000_000)))
    stored = await store.add_cosignatures(cosigned, [witness])
    assert stored == cosigned == store.tree_checkpoint()
    with pytest.raises(PalyraError) as raised:  # not a configured witness
        await store.add_cosignatures(cosigned, [])
    assert raised.value.code is ErrorCode.INVALID_ARGUMENT
    public_key = Signer.load_or_create(journal_dir(data_dir)).public_key
    proven = verify_proof(store.prove_position(2), public_key, witnesses=[witness], quorum=1)
    assert proven.witnesses == ("witness.example/w1",)
    with pytest.raises(NoteError):
        verify_proof(store.prove_position(2), public_key, witnesses=[], quorum=1)
    # The next signing (the tree grew) starts a new note: cosignatures are per checkpoint.
    await _fill(store, 1)
    assert b"witness.example/w1" not in await store.sign_tree()


async def test_retention_keeps_every_leaf_so_no_root_changes(store: JournalStore, data_dir: Path
                                                             ) -> None:
    await _fill(store, 30)
    before = await store.sign_tree()
    result = await prune_older_than(store, 0, now_ms=2**62, through=20)
    assert result.records > 0
    after = await store.sign_tree()  # grew by the journal.pruned record: must extend, not fork
    old = parse_checkpoint(parse_note(before).body)
    new = parse_checkpoint(parse_note(after).body)
    assert new.size == old.size + 1
    assert verify_consistency(old.size, new.size, old.root, new.root,
                              store.consistency(old.size, new.size))  # fmt: skip
    public_key = Signer.load_or_create(journal_dir(data_dir)).public_key
    assert verify_proof(store.prove_position(25), public_key).index == 24
    with pytest.raises(PalyraError):  # a tombstone's content is gone: nothing to prove with it
        store.prove_position(3)
    store.close()
    assert verify_store(data_dir).ok


async def test_the_signer_task_signs_whenever_the_tree_grew(store: JournalStore) -> None:
    task = asyncio.create_task(sign_tree_every(store, interval_s=0.01))
    try:
        for want in (3, 5):
            await _fill(store, want - store.tree_size())
            for _ in range(500):
                note = store.tree_checkpoint()
                if note is not None and parse_checkpoint(parse_note(note).body).size == want:
                    break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError(f"no checkpoint of size {want} was signed")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
