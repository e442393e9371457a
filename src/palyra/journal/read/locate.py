"""Which journal position a proof request names: a position, an approval, a run's tape seq."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from palyra.core.errors import NotFound

if TYPE_CHECKING:
    from palyra.journal._store import JournalStore


def position_of(store: JournalStore, locator: dict[str, str],
                run_of_approval: Callable[[str], str | None] = lambda _id: None) -> int:
    """The journal position a ``prove`` locator names.

    ``--approval`` names the event that decided the approval (its
    ``tape.tool_approval_response``), else the one that asked for it, on the
    tape of the run ``run_of_approval`` gives (the engine's approvals table: the
    journal does not read it itself).

    Raises:
        NotFound: nothing matches.
    """
    if "position" in locator:
        return int(locator["position"])
    if "run" in locator:
        seq = int(locator["seq"])
        page = store.read_tape(locator["run"], seq - 1, 1)
        if not page.events or page.events[0].tape_seq != seq:
            raise NotFound(f"run {locator['run']!r} has no tape seq {seq}")
        return page.events[0].position
    approval_id = locator["approval"]
    run_id = run_of_approval(approval_id)
    if run_id is None:
        raise NotFound(f"approval {approval_id!r} not found")
    found: dict[str, int] = {}
    after = -1
    while True:
        page = store.read_tape(run_id, after, 256)
        for event in page.events:
            payload = event.payload if isinstance(event.payload, dict) else {}
            if payload.get("approvalId") == approval_id:
                found.setdefault(event.kind, event.position)
        if not page.events:
            break
        after = page.events[-1].tape_seq
    for kind in ("tape.tool_approval_response", "tape.tool_approval_request"):
        if kind in found:
            return found[kind]
    raise NotFound(f"approval {approval_id!r} has no event on run {run_id!r}'s tape")
