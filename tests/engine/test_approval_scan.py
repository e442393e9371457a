"""``ApprovalReader.scan``: filtered pages and their cursor, straight over the store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from palyra.engine import ApprovalRecord, IdentityRec
from palyra.engine.model import approvals as appr
from palyra.engine.run.approvals import ApprovalReader, approval_write
from palyra.journal import EventDraft, JournalStore

ALICE, BOB = IdentityRec("user:alice"), IdentityRec("user:bob")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[JournalStore]:
    s = JournalStore.open(tmp_path / "data")
    yield s
    s.close()


async def _plant(store: JournalStore, owners: list[IdentityRec]) -> list[str]:
    """Write one pending approval per owner; the ids in key (= scan) order.

    Ids are ULIDs, so two made in the same millisecond sort in random order:
    the expected order is the sorted ids, not the creation order.
    """
    ids = []
    for owner in owners:
        record = appr.new_record(
            session_id="s", run_id="r", proposal_id="p", tool_name="add",
            arguments={"a": 1, "b": 1}, args_digest="0" * 64, policy_hash="1" * 64,
            risk_level="high", policy_explanation="", requested_by=owner, now_ms=1,
            timeout_s=30)
        await store.append([EventDraft(kind="test.approval", actor="system:test",
                                       entity_writes=(approval_write(record),))])
        ids.append(record.approval_id)
    return sorted(ids)


def _pages(reader: ApprovalReader, keep: object, limit: int) -> list[list[str]]:
    pages, cursor = [], ""
    while True:
        found, cursor = reader.scan(keep, cursor, limit)  # type: ignore[arg-type]
        pages.append([r.approval_id for r in found])
        if not cursor:
            return pages
        assert len(pages) < 50, "the cursor does not advance"


async def test_page_ending_mid_batch_keeps_the_cursor(store: JournalStore) -> None:
    ids = await _plant(store, [ALICE] * 5)
    reader = ApprovalReader(store)
    first, cursor = reader.scan(lambda r: True, "", 2)
    # Five rows fit in one store batch; the page filled after two of them.
    assert [r.approval_id for r in first] == ids[:2] and cursor == ids[1]
    assert _pages(reader, lambda r: True, 2) == [ids[:2], ids[2:4], ids[4:]]


async def test_filtered_pages_see_every_match_once(store: JournalStore) -> None:
    owners = [ALICE, BOB, BOB, ALICE, BOB, ALICE, ALICE, BOB]
    ids = await _plant(store, owners)
    reader = ApprovalReader(store)
    everything, cursor = reader.scan(lambda r: True, "", 100)
    assert [r.approval_id for r in everything] == ids and cursor == ""
    alice_ids = [r.approval_id for r in everything if r.requested_by == ALICE]
    assert len(alice_ids) == 4 and set(alice_ids) <= set(ids)

    def alices(r: ApprovalRecord) -> bool:
        return r.requested_by == ALICE

    pages = _pages(reader, alices, 2)
    assert [i for page in pages for i in page] == alice_ids
    assert all(len(page) <= 2 for page in pages)


async def test_last_row_fills_the_page_no_cursor(store: JournalStore) -> None:
    ids = await _plant(store, [ALICE] * 4)
    found, cursor = ApprovalReader(store).scan(lambda r: True, ids[1], 2)
    assert [r.approval_id for r in found] == ids[2:] and cursor == ""
