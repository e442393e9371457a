"""bench.journal's harness floor: the null appender answers every append, batched, with what
``prepare`` made, and refuses a bad draft in the caller as the store does."""

from __future__ import annotations

import asyncio

import pytest

from bench.journal import NullAppender, bench_floor
from palyra.core.errors import InvalidArgument
from palyra.journal import EventDraft


async def test_null_appender_answers_each_caller_with_its_prepared_events() -> None:
    null = NullAppender()
    try:
        drafts = [EventDraft("k", "a", session_id=f"s{i}", payload={"i": i}) for i in range(40)]
        results = await asyncio.gather(*(null.append([d]) for d in drafts))
        assert [r[0].value for r in results] == [{"i": i} for i in range(40)]
        assert [r[0].session_id for r in results] == [f"s{i}" for i in range(40)]
        assert 1 <= null.batches <= 40
        with pytest.raises(InvalidArgument):
            null.append([EventDraft("k", "a", tape=True)])  # a tape event needs a run_id
    finally:
        null.close()


async def test_floor_line_has_the_journal_lines_shape() -> None:
    line = await bench_floor(appenders=8, events=64, rounds=2)
    assert line["config"] == "harness_floor"
    assert (line["appenders"], line["events"]) == (8, 64)
    assert 1 <= line["commits"] <= 64  # the batches the null appender answered
    assert line["cpu_us_per_event"] > 0 and line["events_per_s"] > 0
