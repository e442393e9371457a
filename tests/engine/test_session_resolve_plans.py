"""``SessionWriter.resolving``: how often a get-or-create reads its selectors."""

from __future__ import annotations

from pathlib import Path

from palyra.engine.model.records import IdentityRec
from palyra.engine.sessions.reader import SessionReader
from palyra.engine.sessions.selectors import Selectors
from palyra.engine.sessions.writer import SessionWriter
from palyra.journal import JournalStore

ALICE = IdentityRec("user:alice", "01J00000000000000000000000", "")


async def test_a_new_session_under_a_minted_id_is_planned_once_an_existing_one_again(
        tmp_path: Path) -> None:
    store = JournalStore.open(tmp_path / "journal")
    reader = SessionReader(store)
    looked: list[Selectors] = []
    lookup = reader.lookup

    def counting(sel: Selectors):  # type: ignore[no-untyped-def]
        looked.append(sel)
        return lookup(sel)

    reader.lookup = counting  # type: ignore[method-assign]
    writer = SessionWriter(store, reader, lambda: 1_000)
    try:
        # New: the selectors' lock is held from the plan to its commit, and its id
        # was minted by the plan, so a second plan would find the same nothing.
        made = await writer.resolve(ALICE, Selectors(session_key="room-1"))
        assert made.created and len(looked) == 1
        # Existing: planned again under the session's own lock.
        again = await writer.resolve(ALICE, Selectors(session_key="room-1"))
        assert not again.created and again.record.session_id == made.record.session_id
        assert len(looked) == 3
        # A caller's own id is not minted here: planned again too.
        own = await writer.resolve(ALICE, Selectors(session_id="01J00000000000000000000001"))
        assert own.created and len(looked) == 5
    finally:
        store.close()


async def test_every_lock_is_given_back_whichever_part_fails(tmp_path: Path) -> None:
    store = JournalStore.open(tmp_path / "journal")
    reader = SessionReader(store)
    writer = SessionWriter(store, reader, lambda: 1_000)
    lookup = reader.lookup
    fail_at = [0]
    calls = [0]

    def failing(sel: Selectors):  # type: ignore[no-untyped-def]
        calls[0] += 1
        if calls[0] == fail_at[0]:
            raise RuntimeError("planted")
        return lookup(sel)

    reader.lookup = failing  # type: ignore[method-assign]
    try:
        await writer.resolve(ALICE, Selectors(session_key="room-1"))  # exists from now on
        for fail in (1, 2):  # the first plan (selectors' lock held), the second (both held)
            calls[0], fail_at[0] = 0, fail
            try:
                async with writer.resolving(ALICE, Selectors(session_key="room-1")):
                    raise AssertionError("the plan should have failed")
            except RuntimeError:
                pass
            assert len(writer._locks) == 0, fail
        calls[0], fail_at[0] = 0, 0
        try:  # the body's own error
            async with writer.resolving(ALICE, Selectors(session_key="room-1")) as plan:
                assert len(writer._locks) == 2  # the selector's and the session's
                raise KeyError(plan.record.session_id)
        except KeyError:
            pass
        assert len(writer._locks) == 0
        plan = await writer.resolve(ALICE, Selectors(session_key="room-1"))
        assert not plan.created
    finally:
        store.close()
