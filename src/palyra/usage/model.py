"""Usage as data: tallies, cost, periods, and which budgets are spent (pure)."""

from __future__ import annotations

import dataclasses
import datetime
import functools
from collections.abc import Callable, Iterable

import msgspec

from palyra.usage.config import Budget, Price


class Tally(msgspec.Struct, frozen=True, kw_only=True):
    """Summed usage of some model calls."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cost_micros: int = 0
    cache_hits: int = 0

    @property
    def tokens(self) -> int:
        """Input + output tokens (what a token budget counts)."""
        return self.input_tokens + self.output_tokens

    def plus(self, other: Tally) -> Tally:
        """The sum of two tallies."""
        return Tally(calls=self.calls + other.calls,
                     input_tokens=self.input_tokens + other.input_tokens,
                     output_tokens=self.output_tokens + other.output_tokens,
                     cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
                     cost_micros=self.cost_micros + other.cost_micros,
                     cache_hits=self.cache_hits + other.cache_hits)


class UsageRow(msgspec.Struct, frozen=True, kw_only=True):
    """One model call's usage as journaled (``meta`` table, ``usage:<day>:<id>``)."""

    day: str
    principal: str
    agent_id: str
    session_id: str
    run_id: str
    provider: str
    model: str
    tally: Tally


def cost_micros(prices: Iterable[Price], provider: str, model: str, *, input_tokens: int,
                output_tokens: int, cached_input_tokens: int) -> int:
    """The call's cost from the first matching price (an exact model before ``*``), rounded
    up to a whole micro-unit; 0 when nothing prices it."""
    exact: Price | None = None
    wildcard: Price | None = None
    for entry in prices:
        if entry.provider != provider:
            continue
        if entry.model == model and exact is None:
            exact = entry
        elif entry.model == "*" and wildcard is None:
            wildcard = entry
    price = exact or wildcard
    if price is None:
        return 0
    cached = min(cached_input_tokens, input_tokens)
    scaled = ((input_tokens - cached) * price.input_per_mtok
              + cached * price.cached_input_per_mtok + output_tokens * price.output_per_mtok)
    return -(-scaled // 1_000_000)


_DAY_MS = 86_400_000


def day_of(ms: int) -> str:
    """The UTC day ``YYYY-MM-DD`` of a wall-clock time in ms."""
    # Asked twice per model call (the budget check, the usage row): the text of a day
    # is made once (strftime was a few per cent of a step).
    return _day_text(ms // _DAY_MS)


@functools.lru_cache(maxsize=8)
def _day_text(day: int) -> str:
    return datetime.datetime.fromtimestamp(day * 86_400, datetime.UTC).strftime("%Y-%m-%d")


def month_of(day: str) -> str:
    """``YYYY-MM`` of a day."""
    return day[:7]


def period_key(period: str, day: str) -> str:
    """``day:YYYY-MM-DD`` or ``month:YYYY-MM``."""
    return f"day:{day}" if period == "day" else f"month:{month_of(day)}"


@dataclasses.dataclass(frozen=True, slots=True)
class BudgetState:
    """A budget as it applies to one principal or agent now."""

    budget: Budget
    applies_to: str
    used: Tally

    @property
    def exhausted(self) -> bool:
        """Spent: at or over its token or cost cap."""
        b = self.budget
        return bool((b.tokens and self.used.tokens >= b.tokens)
                    or (b.cost_micros and self.used.cost_micros >= b.cost_micros))

    def describe(self) -> str:
        """One line naming the budget and what is spent of it."""
        b = self.budget
        caps = []
        if b.tokens:
            caps.append(f"{self.used.tokens}/{b.tokens} tokens")
        if b.cost_micros:
            caps.append(f"{self.used.cost_micros}/{b.cost_micros} micro-units")
        return (f"{b.mode} {b.period} budget of {b.scope} {self.applies_to} "
                f"({', '.join(caps)})")


Totals = Callable[[str, str, str], Tally]
"""``(scope, subject, period key)`` -> the tally so far."""


def budget_states(budgets: Iterable[Budget], totals: Totals, *, principal: str, agent_id: str,
                  day: str) -> list[BudgetState]:
    """Every budget that applies to a principal's (and its agent's) work on ``day``."""
    out = []
    for b in budgets:
        subject = principal if b.scope == "principal" else agent_id
        if not subject or b.subject not in ("*", subject):
            continue
        out.append(BudgetState(b, subject, totals(b.scope, subject, period_key(b.period, day))))
    return out
