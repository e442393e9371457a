"""Reading the stored transparency-log tree: hashes, tiles, entry bundles, proofs.

The tree's rows live in ``_tlog`` (see ``tlog.merkle``): level 0 holds each
entry (``record_hash ‖ u64 last``), levels 8, 16, … the hashes of full tiles
below. A :class:`StoredTree` reads them in one LMDB transaction and rebuilds any
other node from at most one tile of stored hashes, caching the tiles it read,
so a proof costs O(log n) rows.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from palyra.core.errors import ErrorCode, NotFound, PalyraError
from palyra.journal import _env as names
from palyra.journal._env import JournalEnv
from palyra.journal.format.record import scoped_prefix, u64_key
from palyra.journal.tlog.merkle import (
    HASH_SIZE,
    TILE_HEIGHT,
    TILE_WIDTH,
    Frontier,
    consistency_proof,
    frontier_of,
    inclusion_proof,
    leaf_hash,
    node_hash,
    node_key,
    tree_prefix,
)
from palyra.journal.tlog.note import parse_checkpoint, parse_note
from palyra.journal.tlog.proof import encode_proof

JOURNAL_TREE = ""
"""The id of the journal's one tree (one per shard later, keyed the same way)."""
_U64 = struct.Struct(">Q")
_ENTRY_SIZE = HASH_SIZE + 8


class StoredTree:
    """One tree's rows in one read (or write) transaction."""

    def __init__(self, txn: Any, db: Any | None, tree: str = JOURNAL_TREE) -> None:
        self._txn = txn
        self._db = db
        self.prefix = tree_prefix(tree)
        self._tiles: dict[tuple[int, int], list[list[bytes]]] = {}
        self.size = self._stored_size()

    @staticmethod
    def key_of(tree: str = JOURNAL_TREE) -> bytes:
        """The tree's key in ``_tlog_checkpoints`` (its last signed checkpoint)."""
        return tree_prefix(tree)

    def _stored_size(self) -> int:
        if self._db is None:  # a journal older than the tree, opened read-only
            return 0
        cursor = self._txn.cursor(db=self._db)
        level0 = self.prefix + b"\x00"
        # The first key past level 0, then one back (or the last key if none is past).
        found = cursor.prev() if cursor.set_range(level0 + b"\xff" * 8) else cursor.last()
        if not found or not bytes(cursor.key()).startswith(level0):
            return 0
        return int(_U64.unpack(bytes(cursor.key())[len(level0):])[0]) + 1

    def entry(self, index: int) -> tuple[bytes, int]:
        """``(record_hash, last position)`` of entry ``index``.

        Raises:
            LookupError: no such entry is stored.
        """
        raw = self._txn.get(node_key(self.prefix, 0, index), db=self._db)
        if raw is None or len(raw) != _ENTRY_SIZE:
            raise LookupError(f"tree entry {index} is not stored")
        raw = bytes(raw)
        return raw[:HASH_SIZE], int(_U64.unpack(raw[HASH_SIZE:])[0])

    def entries(self, start: int, end: int) -> list[bytes]:
        """The entries (record hashes) ``start..end-1``, one cursor walk."""
        cursor = self._txn.cursor(db=self._db)
        out: list[bytes] = []
        level0 = self.prefix + b"\x00"
        if cursor.set_range(node_key(self.prefix, 0, start)):
            for key, value in cursor:
                if len(out) >= end - start or not bytes(key).startswith(level0):
                    break
                out.append(bytes(value)[:HASH_SIZE])
        if len(out) != end - start:
            raise LookupError(f"tree entries {start}..{end - 1} are not all stored")
        return out

    def _base(self, level: int, start: int, end: int) -> list[bytes]:
        """Stored hashes of tile level ``level`` (a multiple of 8), indexes ``start..end-1``."""
        if level == 0:
            return [leaf_hash(entry) for entry in self.entries(start, end)]
        cursor = self._txn.cursor(db=self._db)
        out: list[bytes] = []
        prefix = self.prefix + bytes((level,))
        if cursor.set_range(node_key(self.prefix, level, start)):
            for key, value in cursor:
                if len(out) >= end - start or not bytes(key).startswith(prefix):
                    break
                out.append(bytes(value))
        if len(out) != end - start:
            raise LookupError(f"tree level {level} rows {start}..{end - 1} are not all stored")
        return out

    def tile_levels(self, tile_level: int, tile: int, width: int) -> list[list[bytes]]:
        """Every level inside one tile: ``[hashes at 8L, at 8L+1, …]`` over ``width`` bases."""
        cached = self._tiles.get((tile_level, tile))
        if cached is not None and len(cached[0]) >= width:
            return cached
        base = tile * TILE_WIDTH
        levels = [self._base(tile_level * TILE_HEIGHT, base, base + width)]
        while len(levels[-1]) > 1 and len(levels) <= TILE_HEIGHT:
            below = levels[-1]
            levels.append([node_hash(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)])
        self._tiles[(tile_level, tile)] = levels
        return levels

    def hash_at(self, level: int, index: int) -> bytes:
        """The perfect subtree ``(level, index)`` (``tlog.merkle.HashAt``)."""
        tile_level, height = divmod(level, TILE_HEIGHT)
        first = index << height  # its first hash at the tile's base level
        tile, offset = divmod(first, TILE_WIDTH)
        levels = self.tile_levels(tile_level, tile, offset + (1 << height))
        return levels[height][index - (tile * TILE_WIDTH >> height)]

    def frontier(self) -> Frontier:
        """The stored tree's frontier (what the writer plans the next commit on)."""
        return frontier_of(self.size, self.hash_at)

    def index_of_position(self, position: int) -> int:
        """The entry (record) holding journal position ``position``.

        Raises:
            LookupError: no stored entry holds it.
        """
        low, high = 0, self.size - 1
        if high < 0 or self.entry(high)[1] < position or position < 1:
            raise LookupError(f"position {position} is not in the tree")
        while low < high:  # entries' last positions grow: the first with last >= position
            mid = (low + high) // 2
            if self.entry(mid)[1] >= position:
                high = mid
            else:
                low = mid + 1
        return low

    def tile(self, level: int, index: int, width: int) -> bytes:
        """The ``tlog-tiles`` tile ``level/index`` of ``width`` hashes.

        Raises:
            LookupError: the tree does not hold it.
        """
        if not 1 <= width <= TILE_WIDTH:
            raise LookupError(f"tile width {width} is not 1..256")
        # A level-L tile's hashes are the level-8L nodes of full tiles below.
        return b"".join(self._base(level * TILE_HEIGHT, index * TILE_WIDTH,
                                   index * TILE_WIDTH + width))  # fmt: skip

    def entry_bundle(self, index: int, width: int) -> bytes:
        """The ``tlog-tiles`` entry bundle ``index`` (each entry u16-length-prefixed)."""
        if not 1 <= width <= TILE_WIDTH:
            raise LookupError(f"bundle width {width} is not 1..256")
        size = HASH_SIZE.to_bytes(2, "big")
        start = index * TILE_WIDTH
        return b"".join(size + entry for entry in self.entries(start, start + width))


# --- reads through a journal env (the store's and the CLI's) ------------------


def tree_of(env: JournalEnv, txn: Any) -> StoredTree:
    """The journal's tree in ``txn``."""
    return StoredTree(txn, env.dbs.get(names.TLOG))


def signed_note(env: JournalEnv, txn: Any) -> bytes | None:
    """The journal tree's last signed checkpoint note, or None."""
    db = env.dbs.get(names.TLOG_CHECKPOINTS)
    raw = None if db is None else txn.get(StoredTree.key_of(), db=db)
    return None if raw is None else bytes(raw)


def prove_position(env: JournalEnv, txn: Any, position: int) -> bytes:
    """The ``tlog-proof`` of the record holding ``position`` (see ``JournalStore``)."""
    note = signed_note(env, txn)
    if note is None:
        raise NotFound("the transparency log has no signed checkpoint yet")
    size = parse_checkpoint(parse_note(note).body).size
    tree = tree_of(env, txn)
    try:
        index = tree.index_of_position(position)
    except LookupError:
        raise NotFound(f"no record holds position {position}",
                       details={"position": str(position)}) from None  # fmt: skip
    if index >= size:
        raise NotFound(
            f"position {position} is newer than the signed checkpoint (size {size}); "
            "sign one first", details={"position": str(position)})  # fmt: skip
    record = txn.get(u64_key(tree.entry(index)[1]), db=env.dbs[names.EVENTS])
    if record is None or bytes(record[:1]) != b"\x02":
        raise PalyraError(  # the entry's state, not a bad request
            f"position {position} is in a pruned or format 1 record: only format 2 "
            "records can be proven with their content", code=ErrorCode.STATE_CONFLICT,
            details={"position": str(position)})
    return encode_proof(bytes(record), index, inclusion_proof(index, size, tree.hash_at), note)


def consistency(env: JournalEnv, txn: Any, old: int, new: int) -> list[bytes]:
    """The consistency proof from tree size ``old`` to ``new``."""
    tree = tree_of(env, txn)
    if not 0 <= old <= new <= tree.size:  # no such proof exists (a size past the tree, or old > new)
        raise NotFound(f"no consistency proof from size {old} to {new} in a tree of "
                       f"{tree.size}", details={"old": str(old), "new": str(new)})
    return consistency_proof(old, new, tree.hash_at)


def tile(env: JournalEnv, txn: Any, level: int, index: int, width: int) -> bytes:
    """A tile (``level`` -1: an entry bundle) the tree holds entirely."""
    tree = tree_of(env, txn)
    # The tile's last leaf, in exact integers: a tile past the tree is not there
    # (and an index the tree could never reach must not overflow what reads it).
    last_leaf = ((index * TILE_WIDTH + width) << (TILE_HEIGHT * max(level, 0))) - 1
    if last_leaf >= tree.size:
        raise NotFound(f"tile {level}/{index} (width {width}) is past the tree of {tree.size}")
    try:
        if level < 0:
            return tree.entry_bundle(index, width)
        return tree.tile(level, index, width)
    except LookupError as exc:
        raise NotFound(str(exc)) from None


def session_records(env: JournalEnv, txn: Any, session_id: str,
                    size: int) -> Iterator[tuple[int, bytes, list[bytes]]]:  # fmt: skip
    """``(entry index, stored record, inclusion proof at size)`` of each record of one
    session that the tree of ``size`` holds, oldest first: found through ``_by_session``,
    so the work grows with the session, not with the journal."""
    tree = tree_of(env, txn)
    prefix = scoped_prefix(session_id)
    cursor = txn.cursor(db=env.dbs[names.BY_SESSION])
    found = cursor.set_range(prefix)
    events = env.dbs[names.EVENTS]
    while found:
        key = bytes(cursor.key())
        if len(key) != len(prefix) + 8 or not key.startswith(prefix):
            break
        last = int.from_bytes(key[len(prefix):], "big")
        index = tree.index_of_position(last)
        if index >= size:
            break
        record = txn.get(key[len(prefix):], db=events)
        if record is None:
            raise NotFound(f"the session index names position {last}, which holds no record")
        yield index, bytes(record), inclusion_proof(index, size, tree.hash_at)
        found = cursor.next()
