"""RFC 9162 Merkle tree hashing, the tree's frontier and its incremental growth; pure.

The tree's entries are the journal's records in log order: entry ``i`` is the
``record_hash`` of the ``i``-th record (0-based), 32 bytes, and its leaf is
``SHA-256(0x00 ‖ entry)`` (docs/journal/format.md, "Transparency log").

Only the hashes a ``tlog-tiles`` tile holds are stored: tree levels 0, 8, 16, …
(level 0 keeps the entry itself, from which the leaf hash follows). Every other
node is the hash of at most 128 stored ones below it, so a commit writes one
row per record (and one more per 256 records), never ``log n``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from hashlib import sha256
from itertools import repeat

import msgspec

HASH_SIZE = 32
TILE_HEIGHT = 8
"""Levels per tile: a tile holds 256 hashes of one level that is a multiple of 8."""
TILE_WIDTH = 1 << TILE_HEIGHT

EMPTY_ROOT = sha256(b"").digest()
_LEAF, _NODE = b"\x00", b"\x01"
_join = b"".join
_digest = type(sha256()).digest  # HASH.digest, unbound: mapped over hash objects
_U64 = struct.Struct(">Q")

HashAt = Callable[[int, int], bytes]
"""``(level, index) -> hash`` of the perfect subtree of ``2**level`` leaves starting at
leaf ``index << level`` (level 0: the leaf hash)."""


def leaf_hash(entry: bytes) -> bytes:
    """RFC 9162 leaf hash: ``SHA-256(0x00 ‖ entry)``."""
    return sha256(_LEAF + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 9162 interior node: ``SHA-256(0x01 ‖ left ‖ right)``."""
    return sha256(_NODE + left + right).digest()


class Frontier(msgspec.Struct, frozen=True, gc=False):
    """The right edge of a tree of ``size`` leaves: the roots of its perfect subtrees.

    ``roots[k]`` is the root of the k-th perfect subtree from the left; their sizes
    are the set bits of ``size``, largest first. This is all the tree's future
    nodes depend on. A frozen struct, built in C: every commit makes one (a frozen
    dataclass's ``__init__`` was 18 Python opcodes of every commit on the writer).
    """

    size: int = 0
    roots: tuple[bytes, ...] = ()

    def root(self) -> bytes:
        """The tree head (``MTH`` of all leaves); SHA-256 of nothing when empty."""
        if not self.roots:
            return EMPTY_ROOT
        roots = self.roots
        head = roots[-1]
        for left in reversed(roots[:-1]):
            head = node_hash(left, head)
        return head


def tree_prefix(tree: str) -> bytes:
    """The key prefix of one tree's rows: ``u16 len ‖ tree id`` (one tree per shard later)."""
    raw = tree.encode()
    return len(raw).to_bytes(2, "big") + raw


def node_key(prefix: bytes, level: int, index: int) -> bytes:
    """``prefix ‖ u8 level ‖ u64 index``: rows of one level sort by index."""
    return prefix + bytes((level,)) + _U64.pack(index)


def extend(
    frontier: Frontier, entries: Iterable[tuple[bytes, int]], prefix: bytes
) -> tuple[Frontier, list[tuple[bytes, bytes]]]:
    """Append ``(record_hash, last position)`` entries; return the new frontier and rows.

    Rows are ``(key, value)``: level 0 stores ``entry ‖ u64 last`` (the position
    lets a reader find the record holding a position by bisection), the tile levels
    8, 16, … the node hash, each in key order per level.
    """
    size = frontier.size
    stack = list(frontier.roots)
    rows: list[tuple[bytes, bytes]] = []
    level0 = prefix + b"\x00"
    pack = _U64.pack
    for entry, last in entries:
        rows.append((level0 + pack(size), entry + pack(last)))
        head = sha256(_LEAF + entry).digest()
        index, level = size, 0
        while index & 1:  # a right child: fold with the subtree on its left
            head = sha256(_NODE + stack.pop() + head).digest()
            index >>= 1
            level += 1
            if not level % TILE_HEIGHT:
                rows.append((node_key(prefix, level, index), head))
        stack.append(head)
        size += 1
    return Frontier(size, tuple(stack)), rows


def fold(stack: list[bytes], size: int, entries: Iterable[bytes], prefix: bytes, *,
         detached: bool = False) -> list[tuple[bytes, bytes]]:
    """Add the leaves of ``entries`` to the roots ``stack`` of a tree of ``size``, in place.

    Returns the tile-level node rows (levels 8, 16, …) the leaves complete; the
    level-0 rows are the caller's (a verifier compares them in bulk). The tree is
    grown a level at a time: each level's nodes are one pipeline of C calls over
    pairs of the level below (no Python frame per node), the frontier's
    root at a level joins as the left end of that level's run, and an odd run's
    last hash stays as the new root of its level.

    ``detached``: the leaves are a block whose left neighbours are not in ``stack``
    (a verifier checks blocks apart and joins them with :func:`push`): a right child
    with nothing on its left in ``stack`` stays a root. For the block's roots to be
    the roots of the whole tree's nodes, ``size`` must be a multiple of the smallest
    power of two that holds the block (see :func:`fold_block`).
    """
    nodes: list[tuple[bytes, bytes]] = []
    # Every hash of a level in one pipeline of C calls (concatenate, hash, digest):
    # no Python frame per node, which is most of a node's cost next to SHA-256 itself.
    run = list(map(_digest, map(sha256, map(_LEAF.__add__, entries))))
    index, level = size, 0  # the index of run[0] at its level
    kept: list[bytes] = []  # the new roots, lowest level first
    while run:
        if index & 1 and (stack or not detached):  # a right child: its left sibling
            run = [stack.pop(), *run]  # is the frontier's root here
            index -= 1
        if len(run) & 1:
            kept.append(run.pop())
        pairs = iter(run)  # zip(pairs, pairs): each left hash with the right one after it
        tags = repeat(_NODE, len(run) >> 1)
        run = list(map(_digest, map(sha256, map(_join, zip(tags, pairs, pairs, strict=True)))))
        index >>= 1
        level += 1
        if not level % TILE_HEIGHT:
            nodes += [(node_key(prefix, level, at), head) for at, head in enumerate(run, index)]
    stack += reversed(kept)
    return nodes


def fold_block(entries: Iterable[bytes], start: int, prefix: bytes
               ) -> tuple[list[bytes], list[tuple[bytes, bytes]]]:
    """The roots (largest first) and tile-level rows of a block of leaves on its own.

    ``start`` is the block's first leaf index, a multiple of the smallest power of
    two that holds the block: then every node the block completes lies inside it,
    and its roots are the perfect subtrees a tree ending with it has there (or, for
    a block of a power-of-two size, its one root, which :func:`push` joins on).
    """
    roots: list[bytes] = []
    return roots, fold(roots, start, entries, prefix, detached=True)


def push(stack: list[bytes], level: int, index: int, node: bytes, prefix: bytes
         ) -> list[tuple[bytes, bytes]]:
    """Add the root ``node`` of the perfect subtree ``(level, index)`` to the roots ``stack``.

    The tree's size must be ``index << level`` (the subtree comes next). Returns the
    tile-level rows (levels 8, 16, …) it completes, like :func:`fold`.
    """
    rows: list[tuple[bytes, bytes]] = []
    while index & 1:  # a right child: fold with the subtree on its left
        node = sha256(_NODE + stack.pop() + node).digest()
        index >>= 1
        level += 1
        if not level % TILE_HEIGHT:
            rows.append((node_key(prefix, level, index), node))
    stack.append(node)
    return rows


def frontier_of(size: int, hash_at: HashAt) -> Frontier:
    """The frontier of a stored tree of ``size`` leaves, read through ``hash_at``."""
    roots: list[bytes] = []
    start = 0
    for level in range(size.bit_length() - 1, -1, -1):
        if size >> level & 1:
            roots.append(hash_at(level, start >> level))
            start += 1 << level
    return Frontier(size, tuple(roots))


def subtree_hash(start: int, end: int, hash_at: HashAt) -> bytes:
    """``MTH(D[start:end])`` for the ranges RFC 9162 proofs use (``start`` aligned)."""
    width = end - start
    if width & (width - 1) == 0:
        level = width.bit_length() - 1
        return hash_at(level, start >> level)
    split = 1 << (width - 1).bit_length() - 1
    return node_hash(subtree_hash(start, start + split, hash_at),
                     subtree_hash(start + split, end, hash_at))  # fmt: skip


def root_at(size: int, hash_at: HashAt) -> bytes:
    """The tree head at ``size`` (any size up to the stored one)."""
    return subtree_hash(0, size, hash_at) if size else EMPTY_ROOT


def _split(width: int) -> int:
    """The largest power of two smaller than ``width`` (``width`` >= 2)."""
    return 1 << (width - 1).bit_length() - 1


def inclusion_proof(index: int, size: int, hash_at: HashAt) -> list[bytes]:
    """RFC 9162 ``PATH(index, D[0:size])``, leaf's sibling first.

    Raises:
        ValueError: ``index`` is not below ``size``.
    """
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size}")
    path: list[bytes] = []
    start, end = 0, size
    while end - start > 1:
        split = start + _split(end - start)
        if index < split:
            path.append(subtree_hash(split, end, hash_at))
            end = split
        else:
            path.append(subtree_hash(start, split, hash_at))
            start = split
    path.reverse()
    return path


def consistency_proof(old: int, new: int, hash_at: HashAt) -> list[bytes]:
    """RFC 9162 ``PROOF(old, D[0:new])``; empty when ``old`` is 0 or equals ``new``.

    Raises:
        ValueError: ``old`` is larger than ``new``.
    """
    if not 0 <= old <= new:
        raise ValueError(f"no consistency proof from size {old} to {new}")
    if old in (0, new):
        return []
    path: list[bytes] = []
    start, end, whole = 0, new, True
    while True:
        width = end - start
        if old - start == width:
            if not whole:
                path.append(subtree_hash(start, end, hash_at))
            break
        split = start + _split(width)
        if old <= split:
            path.append(subtree_hash(split, end, hash_at))
            end = split
        else:
            path.append(subtree_hash(start, split, hash_at))
            start, whole = split, False
    path.reverse()
    return path


def root_from_inclusion(index: int, size: int, leaf: bytes, path: list[bytes]) -> bytes | None:
    """The root ``path`` proves ``leaf`` at ``index`` under (RFC 9162 §2.1.3.2), or None."""
    if not 0 <= index < size or any(len(p) != HASH_SIZE for p in path):
        return None
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return None
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None


def verify_inclusion(index: int, size: int, leaf: bytes, path: list[bytes], root: bytes) -> bool:
    """True when ``path`` proves ``leaf`` at ``index`` in the tree of ``size`` with ``root``."""
    return root_from_inclusion(index, size, leaf, path) == root


def verify_consistency(
    old: int, new: int, old_root: bytes, new_root: bytes, path: list[bytes]
) -> bool:
    """RFC 9162 §2.1.4.2: does ``path`` prove the tree ``new`` extends the tree ``old``?"""
    if not 0 <= old <= new or any(len(p) != HASH_SIZE for p in path):
        return False
    if old == new:
        return not path and old_root == new_root
    if old == 0:
        return not path and old_root == EMPTY_ROOT
    if not path:
        return False
    hashes = [old_root, *path] if old & (old - 1) == 0 else list(path)
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = hashes[0]
    for c in hashes[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == old_root and sr == new_root and sn == 0


class MemoryTree:
    """Every level of a tree in memory (tests, benchmarks and offline rebuilds)."""

    def __init__(self, leaves: Iterable[bytes] = ()) -> None:
        self.levels: list[list[bytes]] = [list(leaves)]
        self._build()

    def _build(self) -> None:
        level = 0
        while len(self.levels[level]) > 1:
            below = self.levels[level]
            self.levels.append([node_hash(below[i], below[i + 1])
                                for i in range(0, len(below) - 1, 2)])  # fmt: skip
            level += 1

    def append(self, leaf: bytes) -> None:
        """Add one leaf hash, updating the nodes it completes."""
        self.levels[0].append(leaf)
        index, level = len(self.levels[0]) - 1, 0
        while index & 1:
            below = self.levels[level]
            if len(self.levels) <= level + 1:
                self.levels.append([])
            self.levels[level + 1].append(node_hash(below[index - 1], below[index]))
            index >>= 1
            level += 1

    @property
    def size(self) -> int:
        """Number of leaves."""
        return len(self.levels[0])

    def hash_at(self, level: int, index: int) -> bytes:
        """A perfect subtree's hash (see :data:`HashAt`)."""
        return self.levels[level][index]
