"""The one lifecycle wrapper: every run and approval state change goes through it.

The tables are generated from ``spec/lifecycle/*.yaml`` into
``palyra_gen.lifecycle``; their pure ``next_state`` raises the generated
``IllegalTransitionError`` (generated code cannot depend on ``palyra``). This is
the one place that error becomes :class:`palyra.core.errors.IllegalTransition`,
so the engine only ever sees ``PalyraError``. States are the generated
``StrEnum`` ids, which compare and encode exactly like the YAML names stored in
records, so the journal bytes are the same whether a literal or a member was
used.
"""

from __future__ import annotations

from palyra_gen.lifecycle import IllegalTransitionError
from palyra_gen.lifecycle.approval import STATE_TO_PROTO as _APPROVAL_PROTO
from palyra_gen.lifecycle.approval import ApprovalEvent, ApprovalStateId
from palyra_gen.lifecycle.approval import next_state as _approval_next
from palyra_gen.lifecycle.run import FINAL_STATES as _RUN_FINAL
from palyra_gen.lifecycle.run import PROTO_TO_STATE as _RUN_OF_PROTO
from palyra_gen.lifecycle.run import STATE_TO_PROTO as _RUN_PROTO
from palyra_gen.lifecycle.run import RunEvent, RunStateId
from palyra_gen.lifecycle.run import next_state as _run_next
from palyra_gen.palyra import v1 as pb

from palyra.core.errors import IllegalTransition

__all__ = [
    "ApprovalEvent",
    "ApprovalStateId",
    "RunEvent",
    "RunStateId",
    "approval_next",
    "approval_state_proto",
    "as_illegal_transition",
    "is_run_terminal",
    "run_can",
    "run_next",
    "run_state_of_proto",
    "run_state_proto",
]


def as_illegal_transition(exc: IllegalTransitionError) -> IllegalTransition:
    """The ``PalyraError`` for a generated ``IllegalTransitionError`` (details keep the names)."""
    return IllegalTransition(
        f"invalid {exc.lifecycle.lower() or 'lifecycle'} state transition from {exc.state} "
        f"via {exc.event}",
        details={"lifecycle": exc.lifecycle, "state": exc.state, "event": exc.event},
    )


def run_next(state: str, event: str) -> RunStateId:
    """The run state after ``event``, per ``spec/lifecycle/run.yaml``.

    Raises:
        IllegalTransition: when the run machine does not allow ``event`` in ``state``.
    """
    try:
        return _run_next(state, event)
    except IllegalTransitionError as exc:
        raise as_illegal_transition(exc) from exc


def approval_next(state: str, event: str) -> ApprovalStateId:
    """The approval state after ``event``, per ``spec/lifecycle/approval.yaml``.

    Raises:
        IllegalTransition: when the approval machine does not allow it.
    """
    try:
        return _approval_next(state, event)
    except IllegalTransitionError as exc:
        raise as_illegal_transition(exc) from exc


def run_can(state: str, event: str) -> bool:
    """Whether the run machine allows ``event`` in ``state`` (no side effects)."""
    try:
        _run_next(state, event)
    except IllegalTransitionError:
        return False
    return True


_RUN_PROTO_OF_NAME: dict[str, pb.RunState] = {k.value: v for k, v in _RUN_PROTO.items()}


def run_state_proto(state: str) -> pb.RunState:
    """Wire enum of a run state (looked up by its name: no enum constructed per
    status, six of them a channel message)."""
    proto = _RUN_PROTO_OF_NAME.get(state)
    if proto is None:
        RunStateId(state)  # raises ValueError naming the unknown state
        raise AssertionError(f"run state {state!r} has no wire value")
    return proto


def run_state_of_proto(value: pb.RunState, default: str) -> str:
    """The run state a wire enum names (``default`` for UNSPECIFIED or unknown)."""
    return _RUN_OF_PROTO.get(value, default)


_APPROVAL_PROTO_OF_NAME: dict[str, pb.ApprovalState] = {
    k.value: v for k, v in _APPROVAL_PROTO.items()}


def approval_state_proto(state: str) -> pb.ApprovalState:
    """Wire enum of an approval state (looked up by its name, as :func:`run_state_proto`:
    no two enums constructed per call, four of them an approved step)."""
    proto = _APPROVAL_PROTO_OF_NAME.get(state)
    if proto is None:
        ApprovalStateId(state)  # raises ValueError naming the unknown state
        raise AssertionError(f"approval state {state!r} has no wire value")
    return proto


def is_run_terminal(state: str) -> bool:
    """True for done, failed and cancelled."""
    return state in _RUN_FINAL
