"""The usage ledger: one journaled row per model call, sums kept in memory.

Each call's row is an entity write of the commit that tapes its
``provider_turn_output`` (a key of its own, so concurrent runs never
overwrite each other's counts). The sums per principal, agent and session
are rebuilt from the rows when the daemon starts and then kept up to date
as rows are written, so a budget check reads no storage. A row is counted
when it joins its commit, before that commit is durable: if the commit
fails the daemon's sums run ahead until it restarts, which only ever makes
budgets stricter.
"""

from __future__ import annotations

import os
from collections import defaultdict

import msgspec

from palyra.core.ids import UlidSequence
from palyra.journal import EntityWrite, JournalStore
from palyra.usage.config import UsageConfig
from palyra.usage.model import BudgetState, Tally, UsageRow, budget_states, month_of

TABLE = "meta"
PREFIX = "usage:"
_SCAN = 1000
# Row keys need only be unique and time-ordered, not unguessable: a sequence costs an
# increment where a fresh ULID reads entropy and encodes 26 digits (once per model call).
_KEYS = UlidSequence()
os.register_at_fork(after_in_child=_KEYS.reset)


class UsageLedger:
    """Rows in the journal, sums in memory."""

    def __init__(self, store: JournalStore, config: UsageConfig | None = None) -> None:
        self.config = config or UsageConfig()
        self._store = store
        self._sums: defaultdict[tuple[str, str, str], Tally] = defaultdict(Tally)
        self._loaded = False

    def load(self) -> int:
        """Sum every stored row (once); the number of rows read."""
        if self._loaded:
            return 0
        self._loaded = True
        count, after = 0, ""
        while True:
            rows = self._store.scan_entities(TABLE, PREFIX, after, _SCAN)
            for _key, raw in rows:
                try:
                    self._add(msgspec.msgpack.decode(raw, type=UsageRow))
                except msgspec.DecodeError:
                    continue  # not a row of ours: never trusted blindly
            count += len(rows)
            if len(rows) < _SCAN:
                return count
            after = rows[-1][0]

    def record(self, row: UsageRow) -> EntityWrite:
        """Count ``row`` and return its write, for the commit that tapes the call."""
        self.load()
        self._add(row)
        key = f"{PREFIX}{row.day}:{_KEYS.next()}"
        return EntityWrite(TABLE, key, msgspec.msgpack.encode(row))

    def totals(self, scope: str, subject: str, period: str) -> Tally:
        """Usage of a principal, agent or session in ``day:…``, ``month:…`` or ``all``."""
        self.load()
        return self._sums.get((scope, subject, period), Tally())

    def budgets(self, principal: str, agent_id: str, day: str) -> list[BudgetState]:
        """Every configured budget that applies, with what is spent of it."""
        self.load()
        return budget_states(self.config.budgets, self.totals, principal=principal,
                             agent_id=agent_id, day=day)

    def _add(self, row: UsageRow) -> None:
        periods = (f"day:{row.day}", f"month:{month_of(row.day)}", "all")
        for scope, subject in (("principal", row.principal), ("agent", row.agent_id)):
            if subject:
                for period in periods:
                    self._sums[scope, subject, period] = \
                        self._sums[scope, subject, period].plus(row.tally)
        self._sums["session", row.session_id, "all"] = \
            self._sums["session", row.session_id, "all"].plus(row.tally)
