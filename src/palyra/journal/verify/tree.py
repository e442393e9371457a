"""Verifying the transparency log of a data dir against its chain.

Run after the chain checked out: every record, in log order, must be the tree's
next entry (``record_hash`` and last position), every stored tile-level node
must be the one the records give, and the last signed checkpoint must name the
root of the tree at its size. A journal whose tree was never built (older than
the tree, and not opened by a writer since) has nothing to check, and one whose
tree is shorter than its log (a writer was building it for an older journal and
stopped) is checked as far as the tree goes: the next writer completes it.
"""

from __future__ import annotations

from typing import Any

from palyra.journal import _env as names
from palyra.journal._env import JournalEnv
from palyra.journal.format.record import decode_record, record_hashes
from palyra.journal.read import tlog as stored_tlog
from palyra.journal.tlog.merkle import Frontier, extend, tree_prefix
from palyra.journal.tlog.note import Checkpoint, NoteError, parse_checkpoint, parse_note
from palyra.journal.verify.chainwalk import Tampered

_CHUNK = 4096  # records per read transaction (never pin one snapshot for long)


def check_tree(env: JournalEnv) -> None:
    """Raise :class:`Tampered` at the first record the tree does not match."""
    with env.read() as txn:
        size = stored_tlog.tree_of(env, txn).size
        note = stored_tlog.signed_note(env, txn)
    if size == 0 and note is None:
        return
    signed = None
    if note is not None:
        try:
            signed = parse_checkpoint(parse_note(note).body)
        except NoteError as exc:
            raise Tampered(None, f"transparency log: the signed checkpoint is malformed ({exc})"
                           ) from exc
    prefix = tree_prefix(stored_tlog.JOURNAL_TREE)
    tree = Frontier()
    after = b""
    while tree.size < size:  # records past the tree: it is still being built (see below)
        with env.read() as txn:
            records = _records_after(env, txn, after, size - tree.size)
            if not records:
                break
            tree = _check_chunk(env, txn, records, tree, prefix, signed)
            after = records[-1][0]
    if tree.size != size:
        raise Tampered(None, f"transparency log: the tree holds {size} entries, the journal "
                             f"{tree.size} records")  # fmt: skip
    if signed is not None and signed.size > tree.size:
        raise Tampered(None, f"transparency log: the signed checkpoint of size {signed.size} is "
                             f"beyond the {tree.size} records")  # fmt: skip


def _records_after(env: JournalEnv, txn: Any, after: bytes, most: int
                   ) -> list[tuple[bytes, bytes]]:
    cursor = txn.cursor(db=env.dbs[names.EVENTS])
    found = cursor.set_range(after + b"\x00") if after else cursor.first()
    out: list[tuple[bytes, bytes]] = []
    while found and len(out) < min(_CHUNK, most):
        out.append((bytes(cursor.key()), bytes(cursor.value())))
        found = cursor.next()
    return out


def _check_chunk(
    env: JournalEnv,
    txn: Any,
    records: list[tuple[bytes, bytes]],
    tree: Frontier,
    prefix: bytes,
    signed: Checkpoint | None,
) -> Frontier:
    # The whole chunk grows the tree in one ``extend`` (one frontier, not one a
    # record: half of verify's time went there); the chunk is cut where the signed
    # checkpoint's size falls, to compare roots there. Only when something does
    # not match is the chunk walked again record by record, to name the record.
    db = env.dbs.get(names.TLOG)
    entries = [(record_hashes(value)[0], int.from_bytes(key, "big")) for key, value in records]
    start = tree.size
    cut = len(entries)
    if signed is not None and start < signed.size < start + len(entries):
        cut = signed.size - start
    grown = tree
    for part in (entries[:cut], entries[cut:]):
        if not part:
            continue
        grown, rows = extend(grown, part, prefix)
        if (db is None or any(txn.get(key, db=db) != row for key, row in rows)
                or (signed is not None and grown.size == signed.size
                    and grown.root() != signed.root)):  # fmt: skip
            _name_the_record(txn, db, records, tree, prefix, signed)
    return grown


def _name_the_record(
    txn: Any,
    db: Any,
    records: list[tuple[bytes, bytes]],
    tree: Frontier,
    prefix: bytes,
    signed: Checkpoint | None,
) -> None:
    """Walk a chunk that failed one record at a time and raise at the first bad one."""
    for key, value in records:
        index = tree.size
        digest, last = record_hashes(value)[0], int.from_bytes(key, "big")
        tree, rows = extend(tree, [(digest, last)], prefix)
        for row_key, row in rows:
            if db is None or txn.get(row_key, db=db) != row:
                raise Tampered(decode_record(value).first,
                               f"transparency log: tree entry {index} (or a node above it) "
                               "does not match this record")  # fmt: skip
        if signed is not None and tree.size == signed.size and tree.root() != signed.root:
            raise Tampered(decode_record(value).first,
                           f"transparency log: the signed checkpoint's root at size {signed.size} "
                           "is not the root of the records up to here")  # fmt: skip
    raise AssertionError("a chunk that failed as a whole passed record by record")
