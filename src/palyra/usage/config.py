"""``[usage]``: the price table and the budgets (frozen dataclasses, passed explicitly)."""

from __future__ import annotations

import dataclasses
from typing import Literal


@dataclasses.dataclass(frozen=True, slots=True)
class Price:
    """What one provider's model costs, in micro-units of a currency per million tokens.

    Attributes:
        provider: The provider's registry name.
        model: The model as the provider names it; ``*`` prices every other model.
        input_per_mtok: Uncached input tokens.
        output_per_mtok: Output tokens.
        cached_input_per_mtok: Input tokens the provider served from its prompt cache.
    """

    provider: str
    model: str = "*"
    input_per_mtok: int = 0
    output_per_mtok: int = 0
    cached_input_per_mtok: int = 0

    def __post_init__(self) -> None:
        if min(self.input_per_mtok, self.output_per_mtok, self.cached_input_per_mtok) < 0:
            raise ValueError("prices cannot be negative")


@dataclasses.dataclass(frozen=True, slots=True)
class Budget:
    """A cap on what a principal or an agent may spend per UTC day or month.

    Attributes:
        scope: ``principal`` or ``agent``.
        subject: The principal (``user:alice``) or agent id; ``*`` gives each one
            its own budget of this size.
        period: ``day`` or ``month`` (UTC).
        tokens: Input + output tokens allowed (0: no token cap).
        cost_micros: Cost allowed, in micro-units (0: no cost cap).
        mode: ``suggest`` warns on the tape; ``enforced`` refuses work with
            ``BUDGET_EXHAUSTED`` once the budget is spent.
    """

    scope: Literal["principal", "agent"] = "principal"
    subject: str = "*"
    period: Literal["day", "month"] = "day"
    tokens: int = 0
    cost_micros: int = 0
    mode: Literal["suggest", "enforced"] = "suggest"

    def __post_init__(self) -> None:
        if self.tokens < 0 or self.cost_micros < 0 or not (self.tokens or self.cost_micros):
            raise ValueError("a budget needs a positive tokens or cost_micros cap")
        if not self.subject:
            raise ValueError("a budget needs a subject (or '*')")


@dataclasses.dataclass(frozen=True, slots=True)
class UsageConfig:
    """Prices (``[[usage.prices]]``) and budgets (``[[usage.budgets]]``); none by default."""

    prices: tuple[Price, ...] = ()
    budgets: tuple[Budget, ...] = ()
