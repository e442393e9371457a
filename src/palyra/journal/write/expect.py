"""Which appends of a commit stand on rows that changed (pure; PostgreSQL's writer asks).

An append may carry row expectations (``RowExpectation``: a row holds a value, or
is absent): a compare-and-set, decided on the rows as they are inside the commit's
transaction. The appends of one commit are taken in their queue order, each seeing
the rows as the appends before it in the same commit left them, so two appends that
expected one row's old value cannot both land. An expectation with a deadline
(``before_ms``) holds only while the database's clock, read in the same transaction,
is before it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal._types import RowExpectation
from palyra.journal.write.requests import Append, ExpectingAppend

Row = tuple[str, str]


def expected_rows(batch: Sequence[Append]) -> list[Row]:
    """Every row some append of ``batch`` expects a value of (each once, sorted)."""
    return sorted({(e.table, e.key) for r in batch if isinstance(r, ExpectingAppend)
                   for e in r.expect})


def has_deadline(batch: Sequence[Append]) -> bool:
    """Whether some append of ``batch`` expects a row only until a deadline."""
    return any(e.before_ms for r in batch if isinstance(r, ExpectingAppend) for e in r.expect)


def unmet(batch: Sequence[Append], stored: Mapping[Row, bytes | None],
          now_ms: int | None = None) -> list[Append]:
    """The appends of ``batch`` whose expectations fail, each given its ``STATE_CONFLICT``.

    ``stored``: the value of every :func:`expected_rows` row in the database now (a row
    missing from it is absent); ``now_ms``: the database's clock in the same transaction
    (required when :func:`has_deadline`): an expectation whose ``before_ms`` is not
    after it fails.
    """
    watched = set(expected_rows(batch))
    rows: dict[Row, bytes | None] = dict(stored)
    failed: list[Append] = []
    for request in batch:
        if isinstance(request, ExpectingAppend):
            wrong = next((e for e in request.expect
                          if rows.get((e.table, e.key)) != e.value
                          or _past(e, now_ms)), None)
            if wrong is not None:
                request.error = _conflict(wrong)
                failed.append(request)
                continue
        for event in request.events:  # later appends see this one's rows
            for write in event.entity_writes:
                if (write.table, write.key) in watched:
                    rows[(write.table, write.key)] = write.value
    return failed


def _past(expectation: RowExpectation, now_ms: int | None) -> bool:
    if not expectation.before_ms:
        return False
    if now_ms is None:
        raise ValueError("an expectation with a deadline needs the database's clock")
    return expectation.before_ms <= now_ms


def _conflict(wrong: RowExpectation) -> PalyraError:
    # The same code and details either way: callers treat a row past its deadline as
    # one its asker withdrew (nothing of the append lands).
    return PalyraError(
        f"{wrong.table} row {wrong.key} changed since it was read, or its deadline "
        "passed: nothing was written",
        code=ErrorCode.STATE_CONFLICT, details={"table": wrong.table, "key": wrong.key})
