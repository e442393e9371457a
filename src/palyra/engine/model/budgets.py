"""The error a spent budget raises (one wording for admission and the model call)."""

from __future__ import annotations

from palyra.core.errors import ErrorCode, PalyraError
from palyra.usage.model import BudgetState


def budget_exhausted(state: BudgetState) -> PalyraError:
    """``BUDGET_EXHAUSTED`` naming the budget, its subject and what is spent."""
    b = state.budget
    return PalyraError(
        f"budget exhausted: {state.describe()}; it renews with the next UTC {b.period}",
        code=ErrorCode.BUDGET_EXHAUSTED,
        details={"scope": b.scope, "subject": state.applies_to, "period": b.period,
                 "used_tokens": str(state.used.tokens),
                 "used_cost_micros": str(state.used.cost_micros)})
