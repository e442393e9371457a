"""``palyra usage``: model tokens and cost per day, month and all time, and the budgets."""

from __future__ import annotations

import argparse

from palyra_gen.palyra import v1

from palyra.cli._client import Stubs
from palyra.cli._command import Shown, SubParsers, add_command

_HEADER = ["SCOPE", "SUBJECT", "PERIOD", "CALLS", "INPUT", "OUTPUT", "CACHED IN", "COST (µ)",
           "CACHE HITS"]


def _row(line: v1.UsageLine) -> list[str]:
    t = line.totals or v1.UsageTotals()
    return [line.scope, line.subject, line.period, str(t.calls), str(t.input_tokens),
            str(t.output_tokens), str(t.cached_input_tokens), str(t.cost_micros),
            str(t.cache_hits)]


def _budget_row(b: v1.BudgetStatus) -> list[str]:
    spent = "EXHAUSTED" if b.exhausted else "ok"
    caps = " ".join(part for part in (
        f"{b.used_tokens}/{b.limit_tokens} tokens" if b.limit_tokens else "",
        f"{b.used_cost_micros}/{b.limit_cost_micros} µ" if b.limit_cost_micros else "") if part)
    return [f"budget:{b.mode}", f"{b.scope} {b.applies_to}", b.period, spent, caps,
            "", "", "", ""]


async def _usage(stubs: Stubs, args: argparse.Namespace) -> Shown:
    answer = await stubs.usage.get_usage(v1.GetUsageRequest(
        agent_id=args.agent, session_id=args.session,
        run_id=args.run, day=args.day))
    rows = [_row(line) for line in answer.lines] + [_budget_row(b) for b in answer.budgets]
    return Shown(answer, _HEADER, rows)


def add_parser(commands: SubParsers) -> None:
    """Register ``usage``."""
    # Whose usage: the caller's, i.e. the connection's --principal.
    parser = add_command(commands, "usage", "model tokens and cost of the caller (--principal) "
                                            "and the budgets that apply", _usage)
    parser.add_argument("--agent", default="", help="an agent id (operators)")
    parser.add_argument("--session", default="", help="a session id")
    parser.add_argument("--run", default="", help="a run id")
    parser.add_argument("--day", default="", help="UTC day YYYY-MM-DD (default: today)")
