"""Lifecycle transitions with palyra's error type.

The tables and machines are generated from ``spec/lifecycle/*.yaml`` into
``palyra_gen.lifecycle``; they raise the generated ``IllegalTransitionError``
(generated code cannot depend on ``palyra``). This module is the one place that
error becomes ``palyra.core.errors.IllegalTransition``, so the engine only ever
sees ``PalyraError``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from palyra_gen.lifecycle import IllegalTransitionError
from palyra_gen.lifecycle import approval as _approval
from palyra_gen.lifecycle import background_task as _background_task
from palyra_gen.lifecycle import run as _run

from palyra.core.errors import IllegalTransition

__all__ = [
    "IllegalTransitionError",
    "as_illegal_transition",
    "next_approval_state",
    "next_run_state",
    "next_task_state",
    "translate_illegal_transitions",
]


def as_illegal_transition(exc: IllegalTransitionError) -> IllegalTransition:
    """The ``PalyraError`` for a generated ``IllegalTransitionError`` (details keep the names)."""
    return IllegalTransition(
        str(exc),
        details={"lifecycle": exc.lifecycle, "state": exc.state, "event": exc.event},
    )


@contextmanager
def translate_illegal_transitions() -> Iterator[None]:
    """Re-raise ``IllegalTransitionError`` from the block as ``IllegalTransition``.

    Use around a generated ``<Name>Machine`` event call.

    Raises:
        IllegalTransition: when the block raised ``IllegalTransitionError``.
    """
    try:
        yield
    except IllegalTransitionError as exc:
        raise as_illegal_transition(exc) from exc


def next_run_state(state: _run.RunStateId | str, event: _run.RunEvent | str) -> _run.RunStateId:
    """The Run state after ``event``.

    Raises:
        IllegalTransition: if ``event`` is not allowed in ``state``.
    """
    with translate_illegal_transitions():
        return _run.next_state(state, event)


def next_approval_state(
    state: _approval.ApprovalStateId | str, event: _approval.ApprovalEvent | str
) -> _approval.ApprovalStateId:
    """The Approval state after ``event``.

    Raises:
        IllegalTransition: if ``event`` is not allowed in ``state``.
    """
    with translate_illegal_transitions():
        return _approval.next_state(state, event)


def next_task_state(
    state: _background_task.BackgroundTaskStateId | str,
    event: _background_task.BackgroundTaskEvent | str,
) -> _background_task.BackgroundTaskStateId:
    """The BackgroundTask state after ``event``.

    Raises:
        IllegalTransition: if ``event`` is not allowed in ``state``.
    """
    with translate_illegal_transitions():
        return _background_task.next_state(state, event)
