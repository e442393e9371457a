"""Listing runs newest first: a bounded keyset scan over the run table.

Run ids are ULIDs, so descending key order is newest-created first. The page
token is the last run id the scan examined (not the last one returned), so a
filter that matches little never makes one call walk the whole table: a call
examines at most ``MAX_EXAMINED`` rows and may answer a short page with a token.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from palyra.core.ids import is_ulid
from palyra.engine.model.errors import invalid
from palyra.engine.model.records import RUNS, RunRecord, decode
from palyra.journal import JournalStore

MAX_EXAMINED = 5000
_BATCH = 500


@dataclass(frozen=True, slots=True)
class RunQuery:
    """Which runs, and where the previous page stopped."""

    state: str = ""
    """Empty: every state."""
    session_id: str = ""
    """Empty: every session."""
    page_size: int = 50
    page_token: str = ""


def runs_page(store: JournalStore, query: RunQuery,
              visible: Callable[[RunRecord], bool]) -> tuple[list[RunRecord], str]:
    """One page of ``visible`` runs matching ``query`` and the next page token
    (empty when no row is left to examine).

    Raises:
        InvalidArgument: a page token that is no run id.
    """
    if query.page_token and not is_ulid(query.page_token):
        raise invalid("page_token is not one this call returned", field="page_token")
    out: list[RunRecord] = []
    cursor = query.page_token
    examined = 0
    while len(out) < query.page_size and examined < MAX_EXAMINED:
        want = min(_BATCH, MAX_EXAMINED - examined)
        rows = store.scan_entities_before(RUNS, cursor, want)
        for key, raw in rows:
            cursor = key
            examined += 1
            record = decode(RunRecord, raw)
            if _matches(record, query) and visible(record):
                out.append(record)
                if len(out) >= query.page_size:
                    break
        if len(rows) < want and (not rows or cursor == rows[-1][0]):
            return out, ""  # the table's oldest row has been examined
    more = bool(store.scan_entities_before(RUNS, cursor, 1))
    return out, cursor if more else ""


def _matches(record: RunRecord, query: RunQuery) -> bool:
    return ((not query.state or record.state == query.state)
            and (not query.session_id or record.session_id == query.session_id))
