"""WatchJournalVerify over a real journal: rising progress, then VerifyJournal's result."""

from __future__ import annotations

import pytest
from palyra_gen.palyra import v1 as pb

from palyra.app import CallContext, PalyraApp, _journal
from palyra.core.errors import PermissionDenied
from palyra.journal import EventDraft, JournalStore

OPERATOR = CallContext.for_principal("admin:ops", "01J00000000000000000000000")
USER = CallContext.for_principal("user:alice", "01J00000000000000000000000")
SESSION = "01J00000000000000000000001"
RUN = "01J00000000000000000000002"


async def _fill(store: JournalStore, events: int) -> None:
    for start in range(0, events, 500):
        await store.append([EventDraft(kind="client.note", actor="admin:ops", session_id=SESSION,
                                       run_id=RUN, payload={"n": n})
                            for n in range(start, min(start + 500, events))])


async def _watch(app: PalyraApp) -> list[pb.WatchJournalVerifyResponse]:
    return [step async for step in app.watch_journal_verify(OPERATOR,
                                                             pb.WatchJournalVerifyRequest())]


async def test_progress_rises_to_the_head_and_ends_with_verify_journals_result(
        app: tuple[PalyraApp, JournalStore], monkeypatch: pytest.MonkeyPatch) -> None:
    palyra, store = app
    # Every position may be reported, so a walk of a few thousand shows some of them.
    monkeypatch.setattr(_journal, "VERIFY_PROGRESS_EVERY", 1)
    monkeypatch.setattr(_journal, "VERIFY_PROGRESS_INTERVAL_S", 0.0)
    await _fill(store, 20_000)
    head = store.head().count
    steps = await _watch(palyra)
    assert steps[0].checked == 0
    assert all(step.total == head for step in steps)
    checked = [step.checked for step in steps]
    progress = checked[:-1]
    assert progress == sorted(set(progress)), checked  # strictly rising
    assert any(0 < n < head for n in checked), checked
    assert [step.result is not None for step in steps] == [False] * (len(steps) - 1) + [True]
    assert checked[-1] == head
    final = steps[-1].result
    assert final is not None and final.ok and final.event_count == head
    assert final == await palyra.verify_journal(OPERATOR, pb.VerifyJournalRequest())


async def test_the_default_pace_reports_far_fewer_steps_than_positions(
        app: tuple[PalyraApp, JournalStore]) -> None:
    palyra, store = app
    await _fill(store, 5_000)
    steps = await _watch(palyra)
    assert len(steps) < 5_000 // _journal.VERIFY_PROGRESS_EVERY + 3, len(steps)
    assert steps[-1].result is not None and steps[-1].result.ok


async def test_only_operators_may_watch_a_verify(app: tuple[PalyraApp, JournalStore]) -> None:
    palyra, _store = app
    with pytest.raises(PermissionDenied):
        await _watch_as(palyra, USER)


async def _watch_as(app: PalyraApp, ctx: CallContext) -> None:
    async for _step in app.watch_journal_verify(ctx, pb.WatchJournalVerifyRequest()):
        pass
