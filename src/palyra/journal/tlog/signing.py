"""Deciding whether the log may sign a checkpoint: never two inconsistent ones; pure.

The last signed checkpoint of each tree is stored. A new one is signed only if
its tree extends that one: its size is not smaller, and the consistency proof
built from the stored tree between the two sizes verifies against both roots
(the stored rows must also give the root the writer's frontier has). Anything
else is refused with ``JOURNAL_CORRUPT``: a log that signed both would have
forked, which no later repair can undo.
"""

from __future__ import annotations

from collections.abc import Callable

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal.tlog.merkle import (
    Frontier,
    HashAt,
    consistency_proof,
    root_at,
    verify_consistency,
)
from palyra.journal.tlog.note import (
    Checkpoint,
    default_origin,
    parse_checkpoint,
    parse_note,
    sign_checkpoint,
)


def inconsistent(message: str, **details: str) -> PalyraError:
    """The refusal to sign (or accept) a checkpoint that would fork the log."""
    return PalyraError(message, code=ErrorCode.JOURNAL_CORRUPT, details=details)


def last_signed(stored: bytes | None) -> Checkpoint | None:
    """The stored checkpoint's lines (None when the tree was never signed)."""
    return None if stored is None else parse_checkpoint(parse_note(stored).body)


def next_checkpoint(
    stored: bytes | None,
    tree: Frontier,
    hash_at: HashAt,
    origin: str,
    public_key: bytes,
    sign: Callable[[bytes], bytes],
) -> bytes | None:
    """The note to sign and store for ``tree``, or None when ``stored`` already covers it.

    ``origin`` empty means: the stored checkpoint's (a log keeps its name, which
    verifiers and witnesses pin, even when the default changes), else the default
    for ``public_key``.

    Raises:
        PalyraError: ``JOURNAL_CORRUPT`` when ``tree`` does not extend the last
            signed checkpoint (smaller, another root at the same size, or no
            consistency), or the stored rows disagree with ``tree``.
    """
    root = tree.root()
    if root_at(tree.size, hash_at) != root:
        raise inconsistent(f"the stored tree of size {tree.size} does not have the root "
                           "the writer holds", size=str(tree.size))  # fmt: skip
    last = last_signed(stored)
    if not origin:
        origin = last.origin if last is not None else default_origin(public_key)
    if last is not None:
        if last.origin != origin:
            raise inconsistent(f"the tree was signed as {last.origin!r}, not {origin!r}",
                               origin=last.origin)  # fmt: skip
        if tree.size == last.size and root == last.root:
            return None
        proof = consistency_proof(last.size, tree.size, hash_at) if last.size <= tree.size else []
        if tree.size < last.size or not verify_consistency(
            last.size, tree.size, last.root, root, proof
        ):
            raise inconsistent(
                f"refusing to sign a checkpoint of size {tree.size}: it does not extend the "
                f"signed checkpoint of size {last.size}",
                size=str(tree.size), signed_size=str(last.size),
            )  # fmt: skip
    return sign_checkpoint(origin, tree.size, root, public_key, sign)
