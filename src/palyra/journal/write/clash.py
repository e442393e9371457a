"""Which request of a planned batch claims an event id that is taken, if any.

A batch is planned before its ids are checked (``write.writer``): most batches
clash with nothing, so the check is one lookup for a lone append and one
``getmulti`` for many, and only a batch that clashes is walked request by request.
An id is taken when LMDB holds it (the writer's open transaction, which holds
every applied frame), when an answered frame waiting to be applied claims it, or
when the frame still being written claims it.
"""

from __future__ import annotations

from collections.abc import Callable, Set
from typing import Any

from palyra.core.errors import AlreadyExists
from palyra.journal.write.plan import CommitPlan
from palyra.journal.write.requests import Append


def first_clash(
    plan: CommitPlan, live: list[Append], taken: Set[bytes], flying: Set[bytes],
    txn: Any, ids: Any,
) -> Append | None:  # fmt: skip
    """The first request whose event id is taken (it gets its error), else None.

    ``taken``: ids of answered frames not yet in LMDB; ``flying``: ids of the frame
    being written; ``txn``/``ids``: the open transaction and the id table.
    """
    claims = plan.claims
    if len(claims) == 1:  # a lone append's: one get, no list of keys
        key = claims[0][0]
        if key not in taken and key not in flying and txn.get(key, db=ids) is None:
            return None
    else:
        keys = [key for key, _position in claims]
        if (
            len(set(keys)) == len(keys)
            and taken.isdisjoint(keys)
            and flying.isdisjoint(keys)
            and not txn.cursor(db=ids).getmulti(keys)  # one call: what is there
        ):
            return None
    return blame(plan, live, lambda key: key in taken or key in flying
                 or txn.get(key, db=ids) is not None)


def blame(plan: CommitPlan, live: list[Append], is_taken: Callable[[bytes], bool]) -> Append:
    """The first request, in the plan's order, whose event id ``is_taken`` or is claimed
    twice in the plan; it gets its ``AlreadyExists`` error. Both backends' writers call
    this once their one-call check says some id clashed.
    """
    seen: set[bytes] = set()
    events = [(r, e) for r in live for e in r.events]
    for (request, event), (key, _position) in zip(_in_plan_order(plan, events), plan.claims,
                                                  strict=True):
        if key in seen or is_taken(key):
            request.error = AlreadyExists(
                f"event_id {event.event_id} already exists",
                details={"event_id": event.event_id},
            )
            return request
        seen.add(key)
    raise AssertionError("an event id clashed, but none is taken")


def _in_plan_order(
    plan: CommitPlan, events: list[tuple[Append, Any]]
) -> list[tuple[Append, Any]]:
    """``events`` in the order the plan claimed their ids (records gather sessions)."""
    at = {event.event_id: (request, event) for request, event in events}
    return [at[view.event_id] for view in plan.views]
