"""The daemon's signed checkpoints: sign when the head moved, never twice for one head."""

from __future__ import annotations

import asyncio
from pathlib import Path

from palyra.journal import (
    EventDraft,
    JournalStore,
    checkpoint_every,
    sign_head_if_moved,
    verify_store,
)


async def test_sign_head_only_when_it_moved(tmp_path: Path) -> None:
    with JournalStore.open(tmp_path / "j") as store:
        assert await sign_head_if_moved(store) is None  # empty journal: nothing to vouch for
        await store.append([EventDraft(kind="test.a", actor="system", session_id="s")])
        first = await sign_head_if_moved(store)
        assert first is not None and first.position == store.head().count
        assert await sign_head_if_moved(store) is None  # same head: no second signature
        await store.append([EventDraft(kind="test.b", actor="system", session_id="s")])
        second = await sign_head_if_moved(store)
        assert second is not None and second.position == first.position + 1
        assert [c.position for c in store.checkpoints()] == [first.position, second.position]
    report = verify_store(tmp_path / "j")
    assert report.ok and report.checkpoints == 2


async def test_checkpoint_every_signs_in_the_background(tmp_path: Path) -> None:
    with JournalStore.open(tmp_path / "j") as store:
        await store.append([EventDraft(kind="test.a", actor="system", session_id="s")])
        task = asyncio.create_task(checkpoint_every(store, 0.01))
        try:
            async with asyncio.timeout(5):
                while not store.checkpoints():  # noqa: ASYNC110 - polls the store, no event exists
                    await asyncio.sleep(0.01)
        finally:
            task.cancel()
        assert store.checkpoints()[-1].position == store.head().count
