"""What signing the transparency log's tree writes, decided the same way by every backend.

The writer (LMDB's or PostgreSQL's) reads the stored checkpoint note and the tree
in the transaction that will store the answer; this decides the note to store:
a new checkpoint extending the stored one, the stored one with a witness's
cosignatures added, or nothing when the tree has not grown.
"""

from __future__ import annotations

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal.tlog.merkle import Frontier, HashAt
from palyra.journal.tlog.note import add_cosignatures
from palyra.journal.tlog.signing import next_checkpoint
from palyra.journal.write.requests import TreeSign


def note_to_store(request: TreeSign, stored: bytes | None, tree: Frontier,
                  hash_at: HashAt) -> bytes | None:
    """The note ``request`` stores, or None when the stored one stands (the tree has not grown).

    Raises:
        NoteError: cosignatures before any checkpoint, or bad cosignature lines.
        PalyraError: ``JOURNAL_CORRUPT`` when the tree does not extend the stored
            checkpoint (the log never signs two inconsistent ones).
    """
    if request.cosigned is not None:
        if stored is None:  # nothing to cosign yet: a state, not a bad request
            raise PalyraError("the log has signed no checkpoint yet",
                              code=ErrorCode.STATE_CONFLICT)
        note, _added = add_cosignatures(stored, request.cosigned, request.witnesses)
        return note
    signer = request.signer
    return next_checkpoint(stored, tree, hash_at, request.origin, signer.public_key,
                           signer.sign)
