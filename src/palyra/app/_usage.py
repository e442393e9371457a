"""UsageService: model usage and budgets, and the budget check that admits new work."""

from __future__ import annotations

import re
import time

from palyra_gen.palyra import v1 as pb

from palyra.app._base import AppBase
from palyra.app._convert import identity_of
from palyra.app.context import CallContext
from palyra.core.errors import InvalidArgument, NotFound, PermissionDenied
from palyra.core.principals import is_operator
from palyra.usage import BudgetState, Tally, day_of, month_of

_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def totals_proto(t: Tally) -> pb.UsageTotals:
    """The wire form of a tally."""
    return pb.UsageTotals(calls=t.calls, input_tokens=t.input_tokens,
                          output_tokens=t.output_tokens,
                          cached_input_tokens=t.cached_input_tokens,
                          cost_micros=t.cost_micros, cache_hits=t.cache_hits)


def budget_proto(s: BudgetState) -> pb.BudgetStatus:
    """The wire form of a budget's state."""
    b = s.budget
    return pb.BudgetStatus(scope=b.scope, subject=b.subject, period=b.period, mode=b.mode,
                           limit_tokens=b.tokens, limit_cost_micros=b.cost_micros,
                           used_tokens=s.used.tokens, used_cost_micros=s.used.cost_micros,
                           exhausted=s.exhausted, applies_to=s.applies_to)


class UsageApi(AppBase):
    """The UsageService group."""

    async def get_usage(self, ctx: CallContext,
                        request: pb.GetUsageRequest) -> pb.GetUsageResponse:
        """The caller's usage (an operator's: anyone's), per day, month and all time."""
        identity = identity_of(ctx)
        operator = is_operator(identity.principal)
        principal = request.principal.strip() or identity.principal
        if principal != identity.principal and not operator:
            raise PermissionDenied("only an operator may read another principal's usage",
                                   details={"field": "principal"})
        if request.agent_id and not operator:
            raise PermissionDenied("only an operator may read an agent's usage",
                                   details={"field": "agent_id"})
        day = request.day.strip() or day_of(time.time_ns() // 1_000_000)
        if not _DAY.match(day):
            raise InvalidArgument("day must be YYYY-MM-DD", details={"field": "day"})
        usage = self.engine.usage
        periods = (f"day:{day}", f"month:{month_of(day)}", "all")
        lines = [pb.UsageLine(scope="principal", subject=principal, period=p,
                              totals=totals_proto(usage.totals("principal", principal, p)))
                 for p in periods]
        if request.agent_id:
            lines += [pb.UsageLine(scope="agent", subject=request.agent_id, period=p,
                                   totals=totals_proto(usage.totals("agent", request.agent_id, p)))
                      for p in periods]
        if request.session_id:
            session = self.engine.session_reader.get(request.session_id)
            if session is None:
                raise NotFound(f"no session {request.session_id}",
                               details={"session_id": request.session_id})
            if session.identity.principal != identity.principal and not operator:
                raise PermissionDenied("the session belongs to another principal",
                                       details={"field": "session_id"})
            lines.append(pb.UsageLine(scope="session", subject=request.session_id, period="all",
                                      totals=totals_proto(usage.session_totals(
                                          request.session_id))))
        if request.run_id:
            run = self.engine.get_run(identity, request.run_id)  # owners and operators
            lines.append(pb.UsageLine(scope="run", subject=run.run_id, period="all",
                                      totals=totals_proto(run.usage)))
        return pb.GetUsageResponse(
            day=day, month=month_of(day), lines=lines,
            budgets=[budget_proto(s) for s in usage.budgets(principal, request.agent_id, day)])
