"""ListRuns' scan over a real journal: newest first, filtered, and each call examines a
bounded number of rows however little the filter matches (the cap is lowered here so a
small table crosses it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from palyra.core.ids import new_ulid
from palyra.engine import IdentityRec, RunQuery, RunRecord, runs_page
from palyra.engine.model.records import RUNS, encode
from palyra.engine.run import listing
from palyra.journal import EntityWrite, EventDraft, JournalConfig, JournalStore

ALICE, BOB = IdentityRec("user:alice"), IdentityRec("user:bob")


def _record(n: int, run_id: str) -> RunRecord:
    # Every fifth run in id order is alice's and done; the rest are bob's and failed.
    mine = n % 5 == 0
    return RunRecord(run_id=run_id, session_id=f"s{n % 2}",
                     state="done" if mine else "failed", identity=ALICE if mine else BOB,
                     created_ms=n, updated_ms=n)


async def test_pages_walk_every_match_newest_first_within_the_cap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listing, "MAX_EXAMINED", 7)
    monkeypatch.setattr(listing, "_BATCH", 3)
    runs = [_record(n, run_id) for n, run_id in enumerate(sorted(new_ulid() for _ in range(40)))]
    async with JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False)) as store:
        await store.append([EventDraft(kind="test.runs", actor="tester", payload={}).with_writes(
            *(EntityWrite(RUNS, r.run_id, encode(r)) for r in runs))])
        expected = sorted((r.run_id for r in runs if r.identity == ALICE),
                          reverse=True)
        walked: list[str] = []
        token, calls = "", 0
        while True:
            page, token = runs_page(store, RunQuery(state="done", page_size=100,
                                                    page_token=token),
                                    lambda r: r.identity == ALICE)
            calls += 1
            assert len(page) <= 2  # 7 rows examined hold at most two of every fifth
            walked += [r.run_id for r in page]
            if not token:
                break
            assert calls < 40
        assert walked == expected
        assert calls >= 40 // 7  # the cap made it page
        # A page fills before the cap: the token is the last run returned.
        page, token = runs_page(store, RunQuery(page_size=3), lambda r: True)
        assert [r.run_id for r in page] == sorted((r.run_id for r in runs), reverse=True)[:3]
        assert token == page[-1].run_id
        # One at a time: the last short batch is not cut off when the page fills in it.
        one_by_one: list[str] = []
        token = ""
        for _ in range(45):
            page, token = runs_page(store, RunQuery(page_size=1, page_token=token),
                                    lambda r: True)
            one_by_one += [r.run_id for r in page]
            if not token:
                break
        assert one_by_one == sorted((r.run_id for r in runs), reverse=True)
        only = runs_page(store, RunQuery(session_id="s1", page_size=100), lambda r: True)[0]
        assert all(r.session_id == "s1" for r in only) and only
