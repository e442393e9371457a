"""Which appends of one commit stand on rows that changed (``write/expect.py``, pure)."""

from __future__ import annotations

import asyncio

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal import EntityWrite, EventDraft, JournalConfig, RowExpectation
from palyra.journal.write.expect import expected_rows, has_deadline, unmet
from palyra.journal.write.prepare import prepare
from palyra.journal.write.requests import Append, ExpectingAppend

ROW = ("tasks", "id:1")


def _append(loop: asyncio.AbstractEventLoop, value: bytes | None,
            expect: bytes | str | None = "none") -> Append:
    events = prepare([EventDraft(kind="test.row", actor="system:test", entity_writes=(
        EntityWrite(*ROW, value),))], JournalConfig())
    future = loop.create_future()
    if expect == "none":
        return Append(loop, future, events)
    assert not isinstance(expect, str)
    return ExpectingAppend(loop, future, events, (RowExpectation(*ROW, expect),))


def test_an_append_sees_the_rows_as_the_appends_before_it_in_its_commit_left_them() -> None:
    loop = asyncio.new_event_loop()
    try:
        first = _append(loop, b"claimed by a", b"queued")
        second = _append(loop, b"claimed by b", b"queued")  # decided on the same old row
        after = _append(loop, b"done by a", b"claimed by a")
        plain = _append(loop, b"overwritten")
        batch = [first, second, after, plain]
        assert expected_rows(batch) == [ROW]
        failed = unmet(batch, {ROW: b"queued"})
        assert failed == [second]
        assert isinstance(second.error, PalyraError)
        assert second.error.code is ErrorCode.STATE_CONFLICT
        assert first.error is None and after.error is None
        # An absent row is expected as None; a stored row refuses that expectation.
        new = _append(loop, b"new", None)
        assert unmet([new], {}) == []
        assert unmet([_append(loop, b"new", None)], {ROW: b"there"}) != []
    finally:
        loop.close()


def test_an_expectation_with_a_deadline_holds_only_before_it_on_the_clock_given() -> None:
    loop = asyncio.new_event_loop()
    try:
        def applying(value: bytes) -> ExpectingAppend:
            events = prepare([EventDraft(kind="test.row", actor="system:test", entity_writes=(
                EntityWrite(*ROW, None),))], JournalConfig())
            return ExpectingAppend(loop, loop.create_future(), events,
                                   (RowExpectation(*ROW, value, before_ms=1000),))
        assert has_deadline([applying(b"handed")])
        assert not has_deadline([_append(loop, b"x", b"handed")])
        assert unmet([in_time := applying(b"handed")], {ROW: b"handed"}, 999) == []
        assert in_time.error is None
        late = applying(b"handed")
        assert unmet([late], {ROW: b"handed"}, 1000) == [late]  # the row as handed, too late
        assert isinstance(late.error, PalyraError)
        assert late.error.code is ErrorCode.STATE_CONFLICT
        assert late.error.details["key"] == ROW[1]  # read by callers as "withdrawn"
        # A late append consumed nothing: the one after it still sees the row.
        after = _append(loop, b"given up", b"handed")
        assert unmet([applying(b"handed"), after], {ROW: b"handed"}, 2000) != [after]
        assert after.error is None
    finally:
        loop.close()
