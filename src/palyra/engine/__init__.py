"""The run engine: sessions, runs, the agent loop, approvals, recovery, cancellation.

Build an :class:`Engine` over a journal store, a model provider and the policy
and tool ports, enter it (``async with engine``), call :meth:`Engine.recover`
before serving, and :meth:`Engine.drain` (or leave the context) on SIGTERM.
"""

from palyra.engine._approvals import Decision
from palyra.engine._config import EngineConfig
from palyra.engine._engine import Engine, Started, StartRun, may_access
from palyra.engine._failures import RunFailed
from palyra.engine._policy_adapter import GatePolicy
from palyra.engine._ports import PolicyPort, ToolOutcome, ToolRequest, ToolsPort, ToolVerdict
from palyra.engine._records import (
    ApprovalRecord,
    GrantRec,
    IdentityRec,
    InputRec,
    PromptRec,
    RunRecord,
    SessionRecord,
)
from palyra.engine._recovery import RecoveryReport
from palyra.engine._session_ops import CleanupResult
from palyra.engine._sessions import Selectors
from palyra.engine._tools_adapter import RegistryTools

__all__ = [
    "ApprovalRecord",
    "CleanupResult",
    "Decision",
    "Engine",
    "EngineConfig",
    "GatePolicy",
    "GrantRec",
    "IdentityRec",
    "InputRec",
    "PolicyPort",
    "PromptRec",
    "RecoveryReport",
    "RegistryTools",
    "RunFailed",
    "RunRecord",
    "Selectors",
    "SessionRecord",
    "StartRun",
    "Started",
    "ToolOutcome",
    "ToolRequest",
    "ToolVerdict",
    "ToolsPort",
    "may_access",
]
