"""Which runs a run's end takes with it: its delegated descendants, as a function over data.

A run that delegated (``agent.delegate``) waits on child runs, which may have
delegated further. When it ends cancelled or failed, every descendant that has
not ended yet is cancelled in the same append as its end (``run.cascade`` does
the I/O). This module decides which runs those are and in what order, from the
delegation tree and the set of runs that already ended; it reads nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

from palyra.engine.model.lifecycle import RunEvent

PARENT_CANCELLED = "parent_cancelled"
PARENT_FAILED = "parent_failed"


def cancel_reach(root: str, children: Mapping[str, Sequence[str]], ended: Set[str]
                 ) -> list[str]:
    """The descendants of ``root`` a cancel of it ends, parents before their children.

    The walk is breadth first and follows the index order of each run's
    children, so the same tree always gives the same order (a tape's events are
    then in the same order on every replay). A run that already ended is not
    cancelled again, but the walk goes on below it: a descendant it left
    running is still reached. A malformed tree (a cycle, or a run listed under
    two parents) cannot make the walk loop or name a run twice.

    >>> cancel_reach("p", {"p": ["a", "b"], "a": ["c"]}, {"b"})
    ['a', 'c']
    """
    seen = {root}
    order: list[str] = []
    frontier = [root]
    while frontier:
        nxt: list[str] = []
        for run_id in frontier:
            for child in children.get(run_id, ()):
                if child in seen:
                    continue
                seen.add(child)
                nxt.append(child)
                if child not in ended:
                    order.append(child)
        frontier = nxt
    return order


def cascade_reason(event: str) -> str:
    """A cascaded child's ``end_reason``: what its parent's end was."""
    return PARENT_CANCELLED if event == RunEvent.CANCEL else PARENT_FAILED
