"""The usage ledger: one journaled row per model call; principal and agent sums in memory.

Each call's row is an entity write of the commit that tapes its
``provider_turn_output`` (a key of its own, so concurrent runs never
overwrite each other's counts). The sums per principal and agent are
rebuilt from the rows when the daemon starts and then kept up to date as
rows are written, so a budget check reads no storage. A row is counted
when it joins its commit, before that commit is durable: if the commit
fails the daemon's sums run ahead until it restarts, which only ever makes
budgets stricter.

A session's sum is not held in memory: sessions never stop being made, and
a sum per session grew the daemon by about 170 bytes per session for as long
as it ran, for a figure only ``GetUsage`` asks for. Rows are keyed by their
session (``usage:s:<session id>:<seq>``), so that figure is one prefix scan
over the session's own rows, read as committed. Rows written before this
layout (``usage:<day>:<seq>``) are summed per session once, at load: that
set is fixed by the old data and never grows.
"""

from __future__ import annotations

import functools
import os
from collections import defaultdict
from collections.abc import Iterator

import msgspec

from palyra.core.ids import UlidSequence
from palyra.journal import EntityWrite, JournalStore
from palyra.usage.config import UsageConfig
from palyra.usage.model import BudgetState, Tally, UsageRow, budget_states, month_of

TABLE = "meta"
PREFIX = "usage:"
SESSION_PREFIX = f"{PREFIX}s:"
"""Rows keyed by session: ``usage:s:<session id>:<seq>``."""
_SCAN = 1000
# Row keys need only be unique and time-ordered, not unguessable: a sequence costs an
# increment where a fresh ULID reads entropy and encodes 26 digits (once per model call).
_KEYS = UlidSequence()
os.register_at_fork(after_in_child=_KEYS.reset)


def row_key(row: UsageRow, seq: str) -> str:
    """The key of a call's row: grouped by session, unique by ``seq``."""
    return f"{SESSION_PREFIX}{row.session_id}:{seq}"


class UsageLedger:
    """Rows in the journal, principal and agent sums in memory."""

    def __init__(self, store: JournalStore, config: UsageConfig | None = None) -> None:
        self.config = config or UsageConfig()
        self._store = store
        self._sums: defaultdict[tuple[str, str, str], Tally] = defaultdict(Tally)
        # Sessions' sums from rows of the old day-keyed layout only (see the module doc).
        self._legacy_sessions: dict[str, Tally] = {}
        self._loaded = False

    def load(self) -> int:
        """Sum every stored row (once); the number of rows read."""
        if self._loaded:
            return 0
        self._loaded = True
        count = 0
        for key, row in self._rows(PREFIX):
            count += 1
            self._add(row)
            if not key.startswith(SESSION_PREFIX):
                self._legacy_sessions[row.session_id] = \
                    self._legacy_sessions.get(row.session_id, Tally()).plus(row.tally)
        return count

    def record(self, row: UsageRow) -> EntityWrite:
        """Count ``row`` and return its write, for the commit that tapes the call."""
        self.load()
        self._add(row)
        return EntityWrite(TABLE, row_key(row, _KEYS.next()), msgspec.msgpack.encode(row))

    def totals(self, scope: str, subject: str, period: str) -> Tally:
        """Usage of a principal or agent in ``day:…``, ``month:…`` or ``all``."""
        self.load()
        return self._sums.get((scope, subject, period), Tally())

    def session_totals(self, session_id: str) -> Tally:
        """Every committed call of ``session_id``, summed from its rows (a prefix scan)."""
        self.load()
        total = self._legacy_sessions.get(session_id, Tally())
        for _key, row in self._rows(f"{SESSION_PREFIX}{session_id}:"):
            if row.session_id == session_id:  # an id holding ':' shares the prefix
                total = total.plus(row.tally)
        return total

    def budgets(self, principal: str, agent_id: str, day: str) -> list[BudgetState]:
        """Every configured budget that applies, with what is spent of it."""
        self.load()
        return budget_states(self.config.budgets, self.totals, principal=principal,
                             agent_id=agent_id, day=day)

    def _rows(self, prefix: str) -> Iterator[tuple[str, UsageRow]]:
        """The rows under ``prefix``, a page at a time (no page is held past its turn)."""
        after = ""
        while True:
            rows = self._store.scan_entities(TABLE, prefix, after, _SCAN)
            for key, raw in rows:
                try:
                    yield key, msgspec.msgpack.decode(raw, type=UsageRow)
                except msgspec.DecodeError:
                    continue  # not a row of ours: never trusted blindly
            if len(rows) < _SCAN:
                return
            after = rows[-1][0]

    def _add(self, row: UsageRow) -> None:
        periods, tally, sums = _periods(row.day), row.tally, self._sums
        for scope, subject in (("principal", row.principal), ("agent", row.agent_id)):
            if subject:
                for period in periods:
                    key = (scope, subject, period)
                    sums[key] = sums[key].plus(tally)


@functools.lru_cache(maxsize=8)
def _periods(day: str) -> tuple[str, str, str]:
    """The periods a call of ``day`` counts in (made once a day, not per model call)."""
    return (f"day:{day}", f"month:{month_of(day)}", "all")
