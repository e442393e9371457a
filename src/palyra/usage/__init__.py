"""Model usage and budgets: what each call cost, summed, and caps on it.

:mod:`~palyra.usage.model` is pure (tallies, cost from the price table, UTC
periods, which budgets are spent); :mod:`~palyra.usage.ledger` journals one row
per model call and keeps the sums in memory.
"""

from palyra.usage.config import Budget, Price, UsageConfig
from palyra.usage.ledger import UsageLedger
from palyra.usage.model import (
    BudgetState,
    Tally,
    UsageRow,
    budget_states,
    cost_micros,
    day_of,
    month_of,
    period_key,
)

__all__ = [
    "Budget",
    "BudgetState",
    "Price",
    "Tally",
    "UsageConfig",
    "UsageLedger",
    "UsageRow",
    "budget_states",
    "cost_micros",
    "day_of",
    "month_of",
    "period_key",
]
