"""Every run and approval state change goes through the generated machines.

A thin adapter over ``palyra_gen.lifecycle.{run,approval}``: the engine keeps
states as the YAML names (plain ``str`` in records) and asks the generated,
pure ``next_state`` for every move. An illegal move is a daemon bug and
surfaces as :class:`IllegalTransition` with its stable code.
"""

from __future__ import annotations

from palyra_gen.lifecycle import IllegalTransitionError
from palyra_gen.lifecycle import approval as _approval
from palyra_gen.lifecycle import run as _run
from palyra_gen.palyra import v1 as pb

from palyra.core.errors import IllegalTransition

RUN_TERMINAL = frozenset(str(s) for s in _run.FINAL_STATES)
APPROVAL_FINAL = frozenset(str(s) for s in _approval.FINAL_STATES)


def run_next(state: str, event: str) -> str:
    """The run state after ``event``, per ``spec/lifecycle/run.yaml``.

    Raises:
        IllegalTransition: when the run machine does not allow ``event`` in ``state``.
    """
    try:
        return str(_run.next_state(_run.RunStateId(state), _run.RunEvent(event)))
    except (IllegalTransitionError, ValueError) as exc:
        raise IllegalTransition(
            f"invalid run state transition from {state} via {event}",
            details={"state": state, "event": event, "machine": "run"},
        ) from exc


def approval_next(state: str, event: str) -> str:
    """The approval state after ``event``, per ``spec/lifecycle/approval.yaml``.

    Raises:
        IllegalTransition: when the approval machine does not allow it.
    """
    try:
        return str(
            _approval.next_state(_approval.ApprovalStateId(state), _approval.ApprovalEvent(event))
        )
    except (IllegalTransitionError, ValueError) as exc:
        raise IllegalTransition(
            f"invalid approval state transition from {state} via {event}",
            details={"state": state, "event": event, "machine": "approval"},
        ) from exc


def run_can(state: str, event: str) -> bool:
    """Whether the run machine allows ``event`` in ``state`` (no side effects)."""
    try:
        run_next(state, event)
    except IllegalTransition:
        return False
    return True


def run_state_proto(state: str) -> pb.RunState:
    """Wire enum of a run state."""
    return pb.RunState(_run.STATE_TO_PROTO[_run.RunStateId(state)])


def approval_state_proto(state: str) -> pb.ApprovalState:
    """Wire enum of an approval state."""
    return pb.ApprovalState(_approval.STATE_TO_PROTO[_approval.ApprovalStateId(state)])


def is_run_terminal(state: str) -> bool:
    """True for done, failed and cancelled."""
    return state in RUN_TERMINAL
