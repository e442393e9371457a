"""The ports and settings every run actor shares (built once by the engine)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from palyra.engine._approvals import ApprovalReader
from palyra.engine._config import EngineConfig
from palyra.engine._ports import PolicyPort, ToolsPort
from palyra.engine._sessions import SessionService
from palyra.journal import JournalStore
from palyra.providers import ModelProvider


@dataclass(frozen=True, slots=True)
class EngineDeps:
    """Shared collaborators of the run actors."""

    store: JournalStore
    provider: ModelProvider
    policy: PolicyPort
    tools: ToolsPort
    config: EngineConfig
    sessions: SessionService
    approvals: ApprovalReader
    now_ms: Callable[[], int]
