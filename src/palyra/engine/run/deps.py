"""The ports, tables and settings every run shares (built once by the engine)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

from palyra.engine.model.config import EngineConfig
from palyra.engine.model.ports import ContextPort, PolicyPort, ToolsPort
from palyra.engine.model.records import RunRecord
from palyra.engine.run.approvals import ApprovalReader, PendingApprovals
from palyra.engine.run.attachments import AttachmentStore
from palyra.engine.sessions.reader import SessionReader
from palyra.engine.sessions.writer import SessionWriter
from palyra.journal import EventDraft, JournalStore
from palyra.providers import ModelProvider, ProviderRegistry
from palyra.usage import UsageLedger

EndContributor = Callable[[RunRecord, str], AbstractAsyncContextManager[Sequence[EventDraft]]]
"""``(record, run event)`` -> a context yielding drafts for the run's ending commit."""


@dataclass(frozen=True, slots=True)
class EngineDeps:
    """Shared collaborators of the runs."""

    store: JournalStore
    provider: ModelProvider
    # Every configured provider by name: runs' model calls go through their routes.
    models: ProviderRegistry
    # Each model call's usage row, the sums, and the budgets.
    usage: UsageLedger
    policy: PolicyPort
    tools: ToolsPort
    config: EngineConfig
    session_reader: SessionReader
    session_writer: SessionWriter
    approval_reader: ApprovalReader
    now_ms: Callable[[], int]
    # Blobs by SHA-256: a tool's images are stored here before its result is taped.
    attachments: AttachmentStore
    # Input assembly beyond the tape (memory auto-inject); None: the tape only.
    context: ContextPort | None = None
    # Called when a live run is about to end failed or cancelled: each yields drafts
    # that commit in the same append as the run's end (e.g. cancelling its tasks).
    end_contributors: list[EndContributor] = field(default_factory=list)
    # The same for the run's delegated descendants (``run.cascade``), asked only by
    # the run whose own end it is: a cascade stages the whole subtree at once.
    cascade: EndContributor | None = None
    # The committed rows of live parked runs' approvals (``run.approvals``).
    pending: PendingApprovals = field(default_factory=PendingApprovals)
    # Several daemons share the journal (sessions owned by lease): an approval may
    # be decided on another daemon and relayed through the journal (``run.relay``).
    shared_journal: bool = False
