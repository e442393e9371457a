"""The approvals table: read a record, page through records, write one in a batch.

Records live under ``a:<approval_id>`` in the ``approvals`` entity table. Writes
are only ever attached to the owning run's batches (``run.writer``), so an
approval's state change and the tape event announcing it are one commit.
``PendingApprovals`` holds the rows of live parked runs as they were committed,
so neither the decider nor the resuming run re-reads what the run just wrote.
"""

from __future__ import annotations

from collections.abc import Callable

from palyra.engine.model.records import APPROVALS, ApprovalRecord, decode, encode, encode_stored
from palyra.journal import EntityWrite, JournalStore

PREFIX = "a:"
_SCAN_BATCH = 1000  # rows read per store scan while filling a page


def approval_key(approval_id: str) -> str:
    """Entity key of an approval record."""
    return PREFIX + approval_id


def approval_write(record: ApprovalRecord) -> EntityWrite:
    """The entity write of an approval record (free text redacted by ``encode``)."""
    return EntityWrite(APPROVALS, approval_key(record.approval_id), encode(record))


def stored_approval_write(stored: ApprovalRecord) -> EntityWrite:
    """The entity write of an approval record already in its stored form (``redacted``'s
    answer): the run's hot path redacts a row once and both writes and holds that form
    (``PendingApprovals``, the decider's answer), so it is not screened a second time."""
    return EntityWrite(APPROVALS, PREFIX + stored.approval_id, encode_stored(stored))


class PendingApprovals:
    """The pending approvals of this process's live runs, exactly as committed.

    A parked run's approval is read twice more on the hot path: by whoever
    decides it (``Engine.decide_approval``: who may, is it still pending) and
    by the run when it resumes (``toolflow.await_decision``). Both are answered
    from here instead of reading and decoding the row the run itself just
    wrote. The rules that keep an entry equal to the committed row:

    - an entry is added as the commit that writes the pending row is handed
      to the journal (after a restart: read from the store, while pending),
      and dropped if that commit fails. Its id reaches a decider only through
      the committed tape event or row (ids are random ULIDs), so a decider
      finds an entry only once it is durable; that event is often delivered
      before the run's task resumes from the commit, hence not "after";
    - it is dropped *before* any commit that changes the row (the decision,
      the timeout, the run's cancel) is handed to the journal, and when the
      run's actor stops (its mailbox closes);
    - a miss falls back to the store, which is the truth.

    A decider racing with the change sees the store's row (still pending until
    that commit lands), delivers to the run's mailbox, and is told
    ``APPROVAL_ALREADY_DECIDED`` there, as before. Bounded by the number of
    live parked runs.
    """

    def __init__(self) -> None:
        self._records: dict[str, ApprovalRecord] = {}

    def __len__(self) -> int:
        return len(self._records)

    def add(self, record: ApprovalRecord) -> None:
        """``record`` is pending and committed as given (its stored form)."""
        self._records[record.approval_id] = record

    def get(self, approval_id: str) -> ApprovalRecord | None:
        """The committed pending record, or None (ask the store)."""
        return self._records.get(approval_id)

    def discard(self, approval_id: str) -> None:
        """Forget ``approval_id``: its row is about to change, or its run stopped."""
        self._records.pop(approval_id, None)


class ApprovalReader:
    """Read side of the approvals table."""

    def __init__(self, store: JournalStore) -> None:
        self._store = store

    def get(self, approval_id: str, fresh: bool = False) -> ApprovalRecord | None:
        """The record, or None (``fresh``: read past the entity cache, which may lag
        another daemon's commit)."""
        if not approval_id:
            return None
        raw = self._store.get_entity(APPROVALS, approval_key(approval_id), fresh=fresh)
        return decode(ApprovalRecord, raw) if raw is not None else None

    def scan(
        self, keep: Callable[[ApprovalRecord], bool], after_id: str, limit: int
    ) -> tuple[list[ApprovalRecord], str]:
        """Records in id (= creation) order after ``after_id`` that pass ``keep``.

        Returns ``(page, next_after_id)``. ``next_after_id`` is empty only when
        the table holds no row after the page; otherwise more records *may*
        match (the next page can come back empty when none of the remaining
        rows pass ``keep`` — finding that out would mean scanning them all).
        """
        out: list[ApprovalRecord] = []
        cursor = approval_key(after_id) if after_id else ""
        while len(out) < limit:
            rows = self._store.scan_entities(APPROVALS, PREFIX, cursor, _SCAN_BATCH)
            for index, (key, value) in enumerate(rows):
                cursor = key
                record = decode(ApprovalRecord, value)
                if keep(record):
                    out.append(record)
                    if len(out) >= limit:
                        # The page filled mid-batch: rows after this one, in
                        # this batch or a later one, belong to the next page.
                        more = index + 1 < len(rows) or len(rows) == _SCAN_BATCH
                        return out, out[-1].approval_id if more else ""
            if len(rows) < _SCAN_BATCH:
                return out, ""
        return out, ""
