"""Calls on a live run check its owner on the run's actor and read no run row.

A run row written by the run's latest commit may not be in LMDB yet when the call
that follows it arrives (the writer answers at the commit log's frame and applies
to LMDB after): reading it waits for the writer, blocking the event loop, for a
check whose answer (the run's owner) never changes.
"""

from __future__ import annotations

from typing import Any

import pytest
from engine_harness import OTHER_USER, USER, Harness
from palyra_gen.palyra import v1 as pb

from palyra.app._convert import identity_of
from palyra.core.errors import ErrorCode, PalyraError
from palyra.engine.model.records import RUNS


def _count_run_reads(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The real store's reads of run rows, in order (the reads still happen)."""
    assert harness.store is not None
    store = harness.store
    seen: list[str] = []
    real = store.get_entity

    def counted(table: str, key: str) -> Any:
        if table == RUNS:
            seen.append(key)
        return real(table, key)

    monkeypatch.setattr(store, "get_entity", counted)
    return seen


async def test_input_and_half_close_on_a_live_run_read_no_run_row(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    app = await harness.start()
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text="hello"), wait=True))
    run_id = created.run.run_id
    reads = _count_run_reads(harness, monkeypatch)
    assert harness.engine is not None
    # What RunStream does with a turn's further input (the app's SendRunInput also
    # reads the row for the agent's budgets, which this does not cover).
    await harness.engine.send_input(identity_of(USER), run_id, "again")
    await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id))
    assert reads == []
    done = await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))
    assert done.run.state == pb.RunState.DONE


async def test_another_principal_is_refused_on_a_live_run(harness: Harness) -> None:
    app = await harness.start()
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text="hello"), wait=True))
    run_id = created.run.run_id
    with pytest.raises(PalyraError) as refused:
        await app.complete_run(OTHER_USER, pb.CompleteRunRequest(run_id=run_id))
    assert refused.value.code is ErrorCode.PERMISSION_DENIED
    assert harness.engine is not None
    with pytest.raises(PalyraError) as refused:
        await harness.engine.send_input(identity_of(OTHER_USER), run_id, "mine now")
    assert refused.value.code is ErrorCode.PERMISSION_DENIED
    run = (await app.get_run(USER, pb.GetRunRequest(run_id=run_id))).run
    assert run.state != pb.RunState.DONE
    assert "mine now" not in str(harness.tape(run_id))
