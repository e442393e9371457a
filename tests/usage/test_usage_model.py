"""The pure usage rules: cost from the price table, periods, which budgets apply and are
spent (cost caps as well as token caps)."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from palyra.usage import Budget, Price, Tally, budget_states, cost_micros, day_of, period_key


def test_cost_uses_the_exact_model_before_the_wildcard_and_rounds_up() -> None:
    prices = [Price("oa", "*", input_per_mtok=1_000_000),
              Price("oa", "big", input_per_mtok=3_000_000, output_per_mtok=15_000_000,
                    cached_input_per_mtok=300_000)]
    assert cost_micros(prices, "oa", "big", input_tokens=1000, output_tokens=100,
                       cached_input_tokens=400) == 600 * 3 + 400 * 0.3 + 100 * 15
    assert cost_micros(prices, "oa", "small", input_tokens=1, output_tokens=0,
                       cached_input_tokens=0) == 1  # 1 micro-unit, rounded up
    assert cost_micros(prices, "an", "big", input_tokens=10**6, output_tokens=10**6,
                       cached_input_tokens=0) == 0  # unpriced


def test_periods_are_utc() -> None:
    assert day_of(1_798_761_599_000) == "2026-12-31"  # 23:59:59 UTC
    assert period_key("month", "2026-12-31") == "month:2026-12"


@given(st.integers(min_value=0, max_value=253_402_300_799_999))  # to 9999-12-31
def test_a_day_is_the_utc_date_of_the_instant(ms: int) -> None:
    # day_of keeps the texts of recent days: each must be the instant's own UTC date,
    # whatever was asked before it (the last millisecond of a day, the first of the next).
    for instant in (ms, ms - ms % 86_400_000 - 1, ms - ms % 86_400_000):
        if instant >= 0:
            expected = datetime.datetime.fromtimestamp(instant / 1000, datetime.UTC)
            assert day_of(instant) == expected.strftime("%Y-%m-%d")


@pytest.mark.parametrize(("used", "spent"), [
    (Tally(cost_micros=4_999_999), False),
    (Tally(cost_micros=5_000_000), True),
])
def test_a_cost_budget_is_spent_at_its_cap(used: Tally, spent: bool) -> None:
    budgets = [Budget(scope="agent", subject="A1", period="month", cost_micros=5_000_000,
                      mode="enforced"),
               Budget(scope="principal", subject="user:bob", tokens=10)]
    seen: list[tuple[str, str, str]] = []

    def totals(scope: str, subject: str, period: str) -> Tally:
        seen.append((scope, subject, period))
        return used

    [state] = budget_states(budgets, totals, principal="user:alice", agent_id="A1",
                            day="2026-11-27")
    assert seen == [("agent", "A1", "month:2026-11")]  # bob's budget is not alice's
    assert state.exhausted is spent
    assert "micro-units" in state.describe()


def test_a_budget_needs_a_cap() -> None:
    with pytest.raises(ValueError, match="positive"):
        Budget()
