"""The run engine: sessions, runs, the agent loop, approvals, recovery, cancellation.

Build an :class:`Engine` over a journal store, a model provider and the policy
and tool ports, enter it (``async with engine``), call :meth:`Engine.recover`
before serving, and :meth:`Engine.drain` (or leave the context) on SIGTERM.

This module is the engine's only front door; the rooms behind it are
``model/`` (pure: records, the lifecycle wrapper, the tape fold and
vocabulary, approval records, token grouping, errors, config and ports),
``run/`` (one run's I/O: writer, step, loop, tool flow, actor, recovery) and
``sessions/`` (one reader, one writer, the one locked resolve).
"""

from palyra.engine.engine import Engine, Started, StartRun, SubjectDecider, may_access
from palyra.engine.model.approvals import SCOPE_PROTO, decided, prompt_proto, risk_proto
from palyra.engine.model.approvals import Decision as ApprovalDecision
from palyra.engine.model.attachments import ATTACHMENT_PREFIX, ATTACHMENT_TABLE
from palyra.engine.model.budgets import budget_exhausted
from palyra.engine.model.config import EngineConfig
from palyra.engine.model.errors import RunFailed
from palyra.engine.model.lifecycle import (
    ApprovalEvent,
    ApprovalStateId,
    RunEvent,
    RunStateId,
    approval_state_proto,
    is_run_terminal,
    run_next,
    run_state_of_proto,
    run_state_proto,
)
from palyra.engine.model.ports import (
    ContextContribution,
    ContextPort,
    ContextRequest,
    PolicyPort,
    ReferenceCall,
    ToolOutcome,
    ToolRequest,
    ToolsPort,
    ToolVerdict,
)
from palyra.engine.model.records import RUNS as RUN_TABLE
from palyra.engine.model.records import (
    ApprovalRecord,
    AttachmentRec,
    GrantRec,
    IdentityRec,
    InputRec,
    PromptRec,
    RunRecord,
    SessionRecord,
)
from palyra.engine.model.tape import field_of as tape_field_of
from palyra.engine.model.tape import is_terminal_status, member_from
from palyra.engine.run.approvals import ApprovalReader, approval_write
from palyra.engine.run.attachments import AttachmentStore
from palyra.engine.run.compact import covered_digest
from palyra.engine.run.listing import RunQuery, runs_page
from palyra.engine.run.recovery import RecoveryReport, live_run_ids
from palyra.engine.run.writer import EndRider, Riding
from palyra.engine.sessions.locks import KeyedLocks, SlotWaitTimeout
from palyra.engine.sessions.ownership import (
    LeaseStore,
    SessionLeases,
    daemon_owner_name,
    session_leases,
)
from palyra.engine.sessions.selectors import Selectors
from palyra.engine.sessions.writer import CleanupResult

__all__ = [
    "ATTACHMENT_PREFIX",
    "ATTACHMENT_TABLE",
    "RUN_TABLE",
    "SCOPE_PROTO",
    "ApprovalDecision",
    "ApprovalEvent",
    "ApprovalReader",
    "ApprovalRecord",
    "ApprovalStateId",
    "AttachmentRec",
    "AttachmentStore",
    "CleanupResult",
    "ContextContribution",
    "ContextPort",
    "ContextRequest",
    "EndRider",
    "Engine",
    "EngineConfig",
    "GrantRec",
    "IdentityRec",
    "InputRec",
    "KeyedLocks",
    "LeaseStore",
    "PolicyPort",
    "PromptRec",
    "RecoveryReport",
    "ReferenceCall",
    "Riding",
    "RunEvent",
    "RunFailed",
    "RunQuery",
    "RunRecord",
    "RunStateId",
    "Selectors",
    "SessionLeases",
    "SessionRecord",
    "SlotWaitTimeout",
    "StartRun",
    "Started",
    "SubjectDecider",
    "ToolOutcome",
    "ToolRequest",
    "ToolVerdict",
    "ToolsPort",
    "approval_state_proto",
    "approval_write",
    "budget_exhausted",
    "covered_digest",
    "daemon_owner_name",
    "decided",
    "is_run_terminal",
    "is_terminal_status",
    "live_run_ids",
    "may_access",
    "member_from",
    "prompt_proto",
    "risk_proto",
    "run_next",
    "run_state_of_proto",
    "run_state_proto",
    "runs_page",
    "session_leases",
    "tape_field_of",
]
