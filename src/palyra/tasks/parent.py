"""A task's parent run: a task may join only a run that has not ended.

A run's end cancels its unfinished tasks. A task enqueued with that run as its parent
in the instant the run ends on another daemon would miss those cancels, so on a shared
journal the enqueue is a compare-and-set on the parent run's row: it expects the row as
it was read when the run was seen alive, and a run that ended in between changes the
row, so the enqueue is refused (``STATE_CONFLICT``) and decided again on the row as it
is, which then refuses it with ``RUN_TERMINAL``. On one daemon (LMDB) the check is
against the row the daemon itself last committed, and the queue refuses the runs whose
end it is committing (``TaskQueue.cancelling_children``).
"""

from __future__ import annotations

import msgspec
from palyra_gen.lifecycle.run import FINAL_STATES

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal import JournalStore, RowExpectation


class _RunState(msgspec.Struct):
    """The one field of a run row this check needs (every other field is ignored)."""

    state: str = ""


_DECODER = msgspec.msgpack.Decoder(_RunState)

RUNS = "runs"
"""The engine's table of runs (``palyra.engine.RUN_TABLE``; tasks do not import the
engine, a test holds the two equal)."""


def run_ended(row: bytes) -> bool:
    """Whether the run row ``row`` (``palyra.engine.model.records.RunRecord``) is final."""
    return _DECODER.decode(row).state in FINAL_STATES


def parent_alive(store: JournalStore, run_id: str, *, fresh: bool = False
                 ) -> RowExpectation:
    """The expectation that ``run_id``'s row stays as it is now, a run not ended.

    An unknown run (no row) is no reason to refuse: the expectation is then that it
    stays unknown. ``fresh``: read the store itself, not this daemon's cache (after a
    compare-and-set on the row failed).

    Raises:
        PalyraError: ``RUN_TERMINAL`` when the run has ended.
    """
    row = store.get_entity(RUNS, run_id, fresh=fresh)
    if row is not None and run_ended(row):
        raise parent_ended(run_id)
    return RowExpectation(RUNS, run_id, row)


def parent_ended(run_id: str) -> PalyraError:
    """The refusal of a task enqueued under ``run_id``, which has ended."""
    return PalyraError(f"run {run_id} has ended: no task can be enqueued under it",
                       code=ErrorCode.RUN_TERMINAL, details={"parent_run_id": run_id})
