"""``PalyraApp``: the one facade both transports call (one async method per RPC)."""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from palyra_gen.palyra import v1 as pb
from palyra_gen.services import PalyraServicesApp

from palyra.app._agents import AgentsApi
from palyra.app._approvals import ApprovalsApi
from palyra.app._channels import ChannelsApi
from palyra.app._journal import JournalApi
from palyra.app._learning import LearningApi
from palyra.app._memory import MemoryApi
from palyra.app._runs import RunsApi
from palyra.app._schedules import SchedulesApi
from palyra.app._sessions import SessionsApi
from palyra.app._skills import SkillsApi
from palyra.app._tasks import TasksApi
from palyra.app._tokens import TokensApi
from palyra.app._usage import UsageApi
from palyra.app._watchdog import WatchdogApi
from palyra.app.context import CallContext
from palyra.core.principals import is_operator


class PalyraApp(RunsApi, SessionsApi, ApprovalsApi, JournalApi, TokensApi, TasksApi,
                WatchdogApi, LearningApi, MemoryApi, AgentsApi, ChannelsApi, SkillsApi, UsageApi,
                SchedulesApi):
    """The application API over one ``Engine``.

    Methods take ``(ctx: CallContext, request)`` and return the response
    message (server streams: an async iterator; ``run_stream`` takes an async
    iterator of requests). Errors are ``PalyraError`` with a stable code.
    """

    readiness: Callable[[], Sequence[tuple[str, bool, str]]] | None = None
    """The daemon's readiness checks as (name, ok, detail) (``palyra.ops.readiness``);
    None: no checks, always ready (an app without a daemon around it)."""
    health_details: Callable[[], Sequence[tuple[str, bool, str]]] | None = None
    reload_policy: Callable[[], Coroutine[Any, Any, None]] | None = None
    """Read the policy files again (the daemon's SIGHUP; ``palyra.daemon.policy_reload``)."""
    """``palyra doctor``'s in-daemon checks, shown to operators (``palyra.ops.doctor``)."""

    async def get_health(self, ctx: CallContext,
                         request: pb.GetHealthRequest) -> pb.GetHealthResponse:
        """Service, version, uptime, journal head and readiness. Needs no auth."""
        head = self.store.head()
        checks = [pb.HealthCheck(name=name, ok=ok, detail=detail)
                  for name, ok, detail in (self.readiness() if self.readiness else ())]
        operator = ctx.identity is not None and is_operator(ctx.identity.principal)
        details = [pb.HealthCheck(name=name, ok=ok, detail=detail) for name, ok, detail in
                   (self.health_details() if operator and self.health_details else ())]
        return pb.GetHealthResponse(
            service="palyra", version=self.engine.config.service_version,
            uptime_ms=int((time.monotonic() - self.started) * 1000),
            journal_events=head.count, journal_head=head.head_hash,
            journal_commits=self.store.stats().commits,
            ready=all(check.ok for check in checks), checks=checks, details=details)


def serves_the_spec(app: PalyraApp) -> PalyraServicesApp[CallContext]:
    """``app`` as the spec's services: mypy checks here that ``PalyraApp`` has
    every RPC of every service with the generated signature (a missing or
    misspelt method, or a wrong request/response type, fails type checking)."""
    return app
