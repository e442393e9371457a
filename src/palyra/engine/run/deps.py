"""The ports, tables and settings every run shares (built once by the engine)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from palyra.engine.model.config import EngineConfig
from palyra.engine.model.ports import ContextPort, PolicyPort, ToolsPort
from palyra.engine.run.approvals import ApprovalReader
from palyra.engine.sessions.reader import SessionReader
from palyra.engine.sessions.writer import SessionWriter
from palyra.journal import JournalStore
from palyra.providers import ModelProvider


@dataclass(frozen=True, slots=True)
class EngineDeps:
    """Shared collaborators of the runs."""

    store: JournalStore
    provider: ModelProvider
    policy: PolicyPort
    tools: ToolsPort
    config: EngineConfig
    session_reader: SessionReader
    session_writer: SessionWriter
    approval_reader: ApprovalReader
    now_ms: Callable[[], int]
    # Input assembly beyond the tape (memory auto-inject); None: the tape only.
    context: ContextPort | None = None
