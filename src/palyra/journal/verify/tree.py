"""Verifying the transparency log of a data dir against its chain.

Every record, in log order, must be the tree's next entry (``record_hash`` and
last position), every stored tile-level node must be the one the records give,
and the last signed checkpoint must name the root of the tree at its size. A
journal whose tree was never built (older than the tree, and not opened by a
writer since) has nothing to check, and one whose tree is shorter than its log
(a writer was building it for an older journal and stopped) is checked as far
as the tree goes: the next writer completes it.

:class:`TreeCheck` rides on the chain walk (``verify.verify``): the walk hands
it each chunk's ``(record hash, key)`` pairs, hashes it already computed, in the
read transaction it read them in, so the records are read and hashed once. A
chunk's level-0 rows are compared in one list comparison against one cursor
run of their values. A mismatch is kept, not raised, until the chain checked out: chain
problems are reported first.
"""

from __future__ import annotations

import struct
from itertools import islice
from operator import itemgetter
from typing import Any

from palyra.journal import _env as names
from palyra.journal._env import JournalEnv
from palyra.journal.read import tlog as stored_tlog
from palyra.journal.tlog.merkle import Frontier, fold, push, tree_prefix
from palyra.journal.tlog.note import Checkpoint, NoteError, parse_checkpoint, parse_note
from palyra.journal.verify.chainwalk import Tampered

_U64 = struct.Struct(">Q")
_join = b"".join
_FIRST = itemgetter(0)

ROW_SIZE = 40
"""A level-0 row's value: the record's hash (32 bytes) ‖ its last position (u64)."""

Leaves = list[tuple[bytes, bytes]]
"""``(record hash, stored key)`` per record in log order (the key is ``u64 last``)."""


def stored_rows(txn: Any, db: Any, level0: bytes, start: int, count: int
                ) -> tuple[list[bytes], bytes | None]:  # fmt: skip
    """The values of the ``count`` level-0 rows from index ``start`` on, and the value stored
    under index ``start + count - 1`` (see :func:`rows_match`)."""
    pack = _U64.pack
    cursor = txn.cursor(db=db)
    run = list(islice(cursor.iternext(keys=False), count)) if cursor.set_key(
        level0 + pack(start)) else []  # fmt: skip
    return run, txn.get(level0 + pack(start + count - 1), db=db)


def rows_match(want: list[bytes], stored: tuple[list[bytes], bytes | None]) -> bool:
    """Whether :func:`stored_rows` read the rows ``want`` (the rows of consecutive indices).

    Values only (no key objects to build or compare): they are the rows of those
    indices exactly when the first and the last of those keys hold the values wanted
    there, since level-0 keys are unique indices in key order and no two entries have
    the same value (each names its own last position): a missing or extra row in
    between shifts a value out of its place.
    """
    run, last = stored
    return run == want and last == want[-1]


class TreeCheck:
    """The stored tree checked chunk by chunk against the records the walk passed."""

    def __init__(self, env: JournalEnv, txn: Any) -> None:
        self._db = env.dbs.get(names.TLOG)
        self.size = stored_tlog.tree_of(env, txn).size
        note = stored_tlog.signed_note(env, txn)
        self._prefix = tree_prefix(stored_tlog.JOURNAL_TREE)
        self._level0 = self._prefix + b"\x00"
        self._signed: Checkpoint | None = None
        self.problem: Tampered | None = None
        self._wanted = self.size > 0 or note is not None
        if note is not None:
            try:
                self._signed = parse_checkpoint(parse_note(note).body)
            except NoteError as exc:
                self.problem = Tampered(None, "transparency log: the signed checkpoint is "
                                              f"malformed ({exc})")  # fmt: skip
        self._roots: list[bytes] = []
        self.checked = 0  # entries checked so far: the tree's size up to here
        self._after = 0  # the last position of the last record checked

    def chunk(self, txn: Any, leaves: Leaves) -> None:
        """Check the next records (as the walk passed them) against the tree; see the module."""
        room = self.size - self.checked
        if not self._wanted or self.problem is not None or room <= 0 or not leaves:
            return
        part = leaves[:room] if len(leaves) > room else leaves
        signed = self._signed
        start = self.checked
        # Cut where the signed checkpoint's size falls, to compare roots there.
        cut = len(part)
        if signed is not None and start < signed.size < start + len(part):
            cut = signed.size - start
        for piece in (part[:cut], part[cut:]):
            if piece and self._grow(txn, piece) is not None:
                self.problem = self._name_the_record(txn, piece)
                return

    def _grow(self, txn: Any, piece: Leaves) -> str | None:
        """Check ``piece`` as the tree's next entries and take it in; else say what failed
        (``"entry"``: a row; ``"root"``: the signed root) and take nothing in."""
        start, level0, db = self.checked, self._level0, self._db
        want = list(map(_join, piece))  # the rows' values: record hash ‖ u64 last
        if db is None:
            return "entry"
        if not rows_match(want, stored_rows(txn, db, level0, start, len(want))):
            return "entry"
        roots = list(self._roots)
        nodes = fold(roots, start, map(_FIRST, piece), self._prefix)
        if any(txn.get(key, db=db) != node for key, node in nodes):
            return "entry"
        size, signed = start + len(piece), self._signed
        if (signed is not None and size == signed.size
                and Frontier(size, tuple(roots)).root() != signed.root):  # fmt: skip
            return "root"
        self._roots, self.checked = roots, size
        self._after = int.from_bytes(piece[-1][1], "big")
        return None

    def _name_the_record(self, txn: Any, piece: Leaves) -> Tampered:
        """Walk a piece that failed one record at a time: the first bad one's problem."""
        for digest, key in piece:
            index, first = self.checked, self._after + 1
            failed = self._grow(txn, [(digest, key)])
            if failed == "root":
                return Tampered(first, "transparency log: the signed checkpoint's root at size "
                                       f"{index + 1} is not the root of the records up to "
                                       "here")  # fmt: skip
            if failed is not None:
                return Tampered(first, f"transparency log: tree entry {index} (or a node above "
                                       "it) does not match this record")  # fmt: skip
        raise AssertionError("a piece that failed as a whole passed record by record")

    @property
    def active(self) -> bool:
        """Whether there is tree left to check (it exists, and no problem was found yet)."""
        return self._wanted and self.problem is None

    @property
    def room(self) -> int:
        """Entries left to check (0 when the tree is not :attr:`active`)."""
        return self.size - self.checked if self.active else 0

    def read_row(self, txn: Any, index: int) -> bytes | None:
        """The stored level-0 row at ``index``, if any."""
        return txn.get(self._level0 + _U64.pack(index), db=self._db) if self._db is not None else None

    @property
    def signed_size(self) -> int:
        """The size the signed checkpoint names (0: none)."""
        return self._signed.size if self._signed is not None else 0

    def join(self, txn: Any, count: int, roots: list[bytes], signed_roots: list[bytes],
             nodes: list[tuple[bytes, bytes]], last: int) -> bool:  # fmt: skip
        """Take in a block of ``count`` entries (a power of two) checked apart, ending at
        position ``last``: its root (``roots[0]``) joins the frontier here; the tile nodes
        inside it (``nodes``, computed apart), those above it and the signed root (from
        ``signed_roots``, the block's roots before the signed size) are checked against
        the stored tree. False, with nothing taken in, if one does not match (the serial
        walk then names it).
        """
        start, db, stack = self.checked, self._db, list(self._roots)
        level = count.bit_length() - 1  # a block of 2**level entries: one root
        rows = push(stack, level, start >> level, roots[0], self._prefix)
        if any(txn.get(key, db=db) != node for key, node in (*nodes, *rows)):
            return False
        size, signed = start + count, self._signed
        if signed is not None and start < signed.size <= size:
            held = stack if signed.size == size else [*self._roots, *signed_roots]
            if Frontier(signed.size, tuple(held)).root() != signed.root:
                return False
        self._roots, self.checked, self._after = stack, size, last
        return True

    def finish(self) -> None:
        """After the walk: raise the first problem, or a tree of another size than the log."""
        if self.problem is not None:
            raise self.problem
        if not self._wanted:
            return
        if self.checked != self.size:
            raise Tampered(None, f"transparency log: the tree holds {self.size} entries, the "
                                 f"journal {self.checked} records")  # fmt: skip
        signed = self._signed
        if signed is not None and signed.size > self.checked:
            raise Tampered(None, f"transparency log: the signed checkpoint of size {signed.size} "
                                 f"is beyond the {self.checked} records")  # fmt: skip

