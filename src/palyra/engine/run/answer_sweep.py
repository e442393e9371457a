"""Answer rows of hand-overs whose askers stopped waiting are deleted.

A daemon that hands a session change or an input to another daemon waits for the
owner's answer row (``session_answer:``, ``run_answer:`` in ``meta``) and deletes it.
An asker that timed out (``UNAVAILABLE`` after twice the lease TTL + 5 s) never will,
yet the owner still applies and answers the hand-over later: that row would stay.

Each daemon's inbox reader sweeps the answer rows every ``SWEEP_EVERY_S``: a row it
has seen for longer than its asker could have waited, plus a margin, is deleted, all
of a sweep's in one commit. Age is measured on this daemon's monotonic clock from when
the sweep first saw the row (the row was written before that, and its asker started
waiting before it was written), so no daemon's wall clock has to be right, and an
answer is never deleted while its asker may still read it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from palyra.engine.model.tape import ENGINE_ACTOR
from palyra.engine.run.inbox import ANSWER_PREFIX as INPUT_ANSWERS
from palyra.engine.sessions.handover import ANSWER_PREFIX as CHANGE_ANSWERS
from palyra.journal import EntityWrite, EventDraft, JournalStore

TABLE = "meta"
PREFIXES = (CHANGE_ANSWERS, INPUT_ANSWERS)
"""The answer rows of handed-over session changes and of handed-over inputs."""
SWEEP_EVERY_S = 30.0
MARGIN_S = 30.0
"""Past the asker's wait: its last read and its own delete have landed by then."""
PAGE = 256
"""Rows looked at per prefix and sweep (memory stays bounded; the rest wait a sweep)."""


def overdue(first_seen: Mapping[str, float], present: Iterable[str], now: float,
            keep_s: float) -> tuple[dict[str, float], list[str]]:
    """``(rows still kept, with when each was first seen; rows to delete)``.

    ``present``: the rows there now; a row seen for ``keep_s`` or longer is due, a row
    no longer present is forgotten.
    """
    kept: dict[str, float] = {}
    due: list[str] = []
    for key in present:
        seen = first_seen.get(key, now)
        if now - seen >= keep_s:
            due.append(key)
        else:
            kept[key] = seen
    return kept, due


class AnswerSweep:
    """Deletes answer rows nobody waits for any more (see the module's note)."""

    def __init__(self, store: JournalStore, keep_s: float, *,
                 every_s: float = SWEEP_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._keep_s = keep_s
        self._every_s = every_s
        self._clock = clock
        self._seen: dict[str, float] = {}
        self._last: float | None = None

    async def maybe(self) -> list[str]:
        """Sweep if the last sweep is ``every_s`` old; the rows it deleted."""
        now = self._clock()
        if self._last is not None and now - self._last < self._every_s:
            return []
        self._last = now
        return await self.sweep()

    async def sweep(self) -> list[str]:
        """Delete the answer rows seen for ``keep_s`` or longer; the rows it deleted."""
        present = [key for prefix in PREFIXES
                   for key, _raw in self._store.scan_entities(TABLE, prefix, "", PAGE)]
        self._seen, due = overdue(self._seen, present, self._clock(), self._keep_s)
        if due:
            await self._store.append([EventDraft(
                kind="meta.answers_expired", actor=ENGINE_ACTOR,
                payload={"rows": len(due)},
                entity_writes=tuple(EntityWrite(TABLE, key, None) for key in due))])
        return due
