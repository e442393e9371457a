"""``palyra journal export --session S``: the session's records with their inclusion proofs.

A session export grows with the session, not with the journal: the file
(``palyra.journal.session-proofs``, docs/journal/format.md "Session proofs") holds
the session's records, each with its inclusion proof under one signed checkpoint
of the transparency log, and nothing of other sessions. ``verify --bundle`` and
``verify-proof`` check it. (``--links`` still writes the older session bundle, a
line for every position of the journal.)

The file holds the records the last signed checkpoint covers. The daemon signs
within a second of an append; with no daemon on the data dir, the export signs
the tree first when its checkpoint lags the tree, as ``prove`` does, so the
session's newest records are in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal import (
    JournalConfig,
    JournalStore,
    NoteError,
    parse_checkpoint,
    parse_note,
    verify_lines,
)


def _signed_size(store: JournalStore) -> int:
    note = store.tree_checkpoint()
    return -1 if note is None else parse_checkpoint(parse_note(note).body).size


def _sign_if_behind(data_dir: Path) -> None:
    """Sign the tree when no checkpoint covers it and no daemon holds the data dir (a
    daemon signs within a second; a locked data dir is left to it)."""
    store = JournalStore.open(data_dir, config=JournalConfig(readonly=True))
    try:
        behind = store.tree_size() > max(_signed_size(store), 0)
    finally:
        store.close()
    if not behind:
        return

    async def sign() -> None:
        writer = JournalStore.open(data_dir)
        try:
            await writer.sign_tree()
        finally:
            writer.close()

    try:
        asyncio.run(sign())
    except PalyraError as exc:
        if exc.code is not ErrorCode.DATA_DIR_LOCKED:
            raise


def export_session(data_dir: Path, session_id: str, out: Path) -> int:
    """Write ``session_id``'s records with their proofs to ``out``; the records written.

    Raises:
        PalyraError: no data dir, or (``NOT_FOUND``) no checkpoint signed yet.
    """
    _sign_if_behind(data_dir)
    store = JournalStore.open(data_dir, config=JournalConfig(readonly=True))
    try:
        return store.export_session_proofs(session_id, out)
    finally:
        store.close()


def verify_session_file(path: Path, keys: Sequence[bytes]) -> tuple[bool, str]:
    """``(ok, the line to print)`` for a session-proofs file, with any of ``keys`` (none:
    integrity only, which anyone who can rewrite the file can also fake). The file is
    read a line at a time, once per key tried.

    Raises:
        OSError: the file cannot be read.
    """
    problem = ""
    trying: list[bytes | None] = [*keys] if keys else [None]
    for key in trying:
        try:
            with path.open("rb") as handle:
                proven = verify_lines(handle, key)
        except NoteError as exc:
            problem = str(exc)
            continue
        summary = (f"OK session={proven.session_id} records={proven.records} "
                   f"events={proven.events} checkpoint={proven.checkpoint.origin}@"
                   f"{proven.checkpoint.size}")  # fmt: skip
        if key is None:
            return True, summary + (" (unsigned check: the records and their proofs are "
                                    "intact, but without a trusted key neither the "
                                    "checkpoint's origin nor completeness is verified)")
        return True, summary + " (checkpoint and seal signed by the trusted key)"
    return False, f"TAMPERED: {problem}"
