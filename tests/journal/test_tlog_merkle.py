"""The transparency log's tree, held to RFC 9162 / RFC 6962 test vectors and to pymerkle.

The vectors are the RFC 6962 ones every CT implementation tests against
(certificate-transparency / transparency-dev ``testonly`` constants: eight
leaves, the roots at sizes 1..8 and some audit paths). ``pymerkle`` is an
independent implementation from the package index (leaf ``0x00`` / node ``0x01``
prefixes, i.e. RFC 9162 hashing); it is used here only, as an oracle.
"""

from __future__ import annotations

import pymerkle
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palyra.journal.tlog.merkle import (
    EMPTY_ROOT,
    Frontier,
    MemoryTree,
    consistency_proof,
    extend,
    fold,
    frontier_of,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root_at,
    tree_prefix,
    verify_consistency,
    verify_inclusion,
)

LEAVES = [bytes.fromhex(x) for x in (
    "", "00", "10", "2021", "3031", "40414243", "5051525354555657",
    "606162636465666768696a6b6c6d6e6f")]  # fmt: skip
ROOTS = [bytes.fromhex(x) for x in (
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328")]  # fmt: skip
INCLUSION = {  # (index, size): audit path
    (0, 8): ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
             "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
             "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"],
    (5, 8): ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
             "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
             "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"],
    (2, 3): ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"],
    (1, 5): ["6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
             "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
             "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"],
    (0, 1): [],
}  # fmt: skip
CONSISTENCY = {  # (old, new): proof
    (1, 1): [],
    (1, 8): ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
             "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
             "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"],
    (6, 8): ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
             "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
             "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"],
    (2, 5): ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
             "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"],
}  # fmt: skip
_TREE = MemoryTree([leaf_hash(x) for x in LEAVES])


def test_rfc_vectors_roots_paths_and_consistency() -> None:
    assert root_at(0, _TREE.hash_at) == EMPTY_ROOT
    assert [root_at(n, _TREE.hash_at) for n in range(1, 9)] == ROOTS
    for (index, size), path in INCLUSION.items():
        assert [h.hex() for h in inclusion_proof(index, size, _TREE.hash_at)] == path
        assert verify_inclusion(index, size, leaf_hash(LEAVES[index]),
                                [bytes.fromhex(h) for h in path], ROOTS[size - 1])  # fmt: skip
    for (old, new), path in CONSISTENCY.items():
        assert [h.hex() for h in consistency_proof(old, new, _TREE.hash_at)] == path
        assert verify_consistency(old, new, ROOTS[old - 1], ROOTS[new - 1],
                                  [bytes.fromhex(h) for h in path])  # fmt: skip


def test_rfc_hasher_vectors() -> None:
    assert leaf_hash(b"L123456").hex() == (
        "395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56")
    assert node_hash(b"N123", b"N456").hex() == (
        "aa217fe888e47007fa15edab33c2b492a722cb106c64667fc2b044444de66bbb")


def _oracle(entries: list[bytes]) -> pymerkle.InmemoryTree:
    tree = pymerkle.InmemoryTree(algorithm="sha256")
    for entry in entries:
        tree.append_entry(entry)
    return tree


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=70))
def test_roots_and_inclusion_paths_equal_pymerkles(entries: list[bytes]) -> None:
    oracle = _oracle(entries)
    frontier, _rows = extend(Frontier(), [(e, i) for i, e in enumerate(entries)], b"")
    tree = MemoryTree([leaf_hash(e) for e in entries])
    assert frontier.root() == oracle.get_root()
    for size in range(1, len(entries) + 1):
        assert root_at(size, tree.hash_at) == oracle.get_root(size)
    size = len(entries)
    for index in range(size):
        theirs = oracle.prove_inclusion(index + 1, size).serialize()["path"][1:]  # 1-based, leaf first
        assert [h.hex() for h in inclusion_proof(index, size, tree.hash_at)] == theirs


@settings(max_examples=40, deadline=None)
@given(st.lists(st.binary(max_size=8), min_size=1, max_size=60), st.data())
def test_pymerkle_accepts_the_roots_we_prove_consistent(entries: list[bytes], data: st.DataObject
                                                         ) -> None:
    oracle = _oracle(entries)
    tree = MemoryTree([leaf_hash(e) for e in entries])
    new = len(entries)
    old = data.draw(st.integers(1, new))
    old_root, new_root = root_at(old, tree.hash_at), root_at(new, tree.hash_at)
    assert verify_consistency(old, new, old_root, new_root, consistency_proof(old, new, tree.hash_at))
    # The oracle's own proof between the same sizes holds for our two roots.
    pymerkle.verify_consistency(old_root, new_root, oracle.prove_consistency(old, new),
                                prior_size=old, later_size=new)  # fmt: skip


def _flip(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300), st.data())
def test_every_inclusion_proof_verifies_and_any_single_bit_flip_fails(size: int,
                                                                      data: st.DataObject) -> None:
    entries = [i.to_bytes(4, "big") * 8 for i in range(size)]
    tree = MemoryTree([leaf_hash(e) for e in entries])
    root = root_at(size, tree.hash_at)
    index = data.draw(st.integers(0, size - 1))
    path = inclusion_proof(index, size, tree.hash_at)
    leaf = leaf_hash(entries[index])
    assert verify_inclusion(index, size, leaf, path, root)
    if path:  # a bit of the proof
        at = data.draw(st.integers(0, len(path) - 1))
        bit = data.draw(st.integers(0, 255))
        assert not verify_inclusion(index, size, leaf, [*path[:at], _flip(path[at], bit),
                                                        *path[at + 1:]], root)  # fmt: skip
    bit = data.draw(st.integers(0, 255))  # a bit of the entry: another leaf
    assert not verify_inclusion(index, size, leaf_hash(_flip(entries[index], bit)), path, root)
    assert not verify_inclusion(index, size, leaf, path, _flip(root, bit))
    other = data.draw(st.integers(0, size - 1))
    if other != index:
        assert not verify_inclusion(other, size, leaf, path, root)
    # The same path claimed for a tree twice as large (or with a hash dropped) proves nothing.
    assert not verify_inclusion(index, size * 2, leaf, path, root)
    assert not verify_inclusion(index, size, leaf, path[:-1], root) or not path


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300), st.data())
def test_consistency_between_any_two_sizes_verifies_and_bit_flips_fail(new: int,
                                                                       data: st.DataObject) -> None:
    tree = MemoryTree([leaf_hash(i.to_bytes(4, "big")) for i in range(new)])
    old = data.draw(st.integers(0, new))
    old_root, new_root = root_at(old, tree.hash_at), root_at(new, tree.hash_at)
    path = consistency_proof(old, new, tree.hash_at)
    assert verify_consistency(old, new, old_root, new_root, path)
    bit = data.draw(st.integers(0, 255))
    if path:
        at = data.draw(st.integers(0, len(path) - 1))
        assert not verify_consistency(old, new, old_root, new_root,
                                      [*path[:at], _flip(path[at], bit), *path[at + 1:]])  # fmt: skip
    if 0 < old < new:
        assert not verify_consistency(old, new, _flip(old_root, bit), new_root, path)
        assert not verify_consistency(old, new, old_root, _flip(new_root, bit), path)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=12))
def test_growing_in_commits_is_growing_at_once_and_the_rows_rebuild_the_frontier(
    commits: list[int],
) -> None:
    """The planner's frontier after any split into commits, and from the stored rows alone."""
    prefix = tree_prefix("")
    entries = [(i.to_bytes(32, "big"), i + 1) for i in range(sum(commits))]
    frontier, stored = Frontier(), {}
    at = 0
    for count in commits:
        frontier, rows = extend(frontier, entries[at:at + count], prefix)
        stored.update(rows)
        at += count
    whole, _rows = extend(Frontier(), entries, prefix)
    assert frontier == whole
    tree = MemoryTree([leaf_hash(e) for e, _last in entries])
    assert frontier.root() == root_at(len(entries), tree.hash_at)
    assert frontier_of(len(entries), tree.hash_at) == frontier
    level0 = [k for k in stored if k[len(prefix)] == 0]
    assert len(level0) == len(entries)  # one row per record, plus tile-level nodes only
    assert all(k[len(prefix)] % 8 == 0 for k in stored)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 700), min_size=1, max_size=6))
def test_folding_a_level_at_a_time_grows_the_tree_extend_grows(commits: list[int]) -> None:
    """``fold`` (the verifier's) gives the frontier and the tile-level rows ``extend`` gives,
    across splits that straddle tiles (256 leaves) and start at odd sizes."""
    prefix = tree_prefix("")
    entries = [(i.to_bytes(32, "big"), i + 1) for i in range(sum(commits))]
    frontier, stack, at = Frontier(), [], 0
    for count in commits:
        part = entries[at:at + count]
        frontier, rows = extend(frontier, part, prefix)
        nodes = fold(stack, at, [entry for entry, _last in part], prefix)
        assert sorted(nodes) == sorted(row for row in rows if row[0][len(prefix)] != 0)
        assert stack == list(frontier.roots)
        at += count
    assert root_at(at, MemoryTree([leaf_hash(e) for e, _last in entries]).hash_at) == (
        Frontier(at, tuple(stack)).root())


def test_proofs_outside_the_tree_are_refused() -> None:
    with pytest.raises(ValueError):
        inclusion_proof(8, 8, _TREE.hash_at)
    with pytest.raises(ValueError):
        consistency_proof(5, 4, _TREE.hash_at)
    assert not verify_inclusion(0, 0, leaf_hash(b""), [], EMPTY_ROOT)
    assert not verify_consistency(0, 1, EMPTY_ROOT, ROOTS[0], [ROOTS[0]])
