"""The journal: one append-only, hash-chained event log in LMDB, with indexes and entity tables.

See ``docs/journal/format.md`` for the storage layout, the hash chain byte layout
and the bundle format, and ``docs/journal/api.md`` for this API.
"""

from palyra.journal._store import JournalStore
from palyra.journal._types import (
    ENTITY_TABLES,
    NO_TAPE_SEQ,
    Checkpoint,
    EntityWrite,
    EventDraft,
    JournalConfig,
    JournalHead,
    JournalStats,
    Lease,
    StoredEvent,
    TapePage,
)
from palyra.journal.format.record import PRUNED_KIND, RETENTION_SESSION
from palyra.journal.read.bundle import export_bundle
from palyra.journal.read.follow import Subscription
from palyra.journal.retention.policy import prune_older_than, retention_every
from palyra.journal.retention.prune import PruneOrder, PruneResult
from palyra.journal.verify.verify import VerifyReport, verify_bundle, verify_store
from palyra.journal.write.autocheckpoint import (
    checkpoint_every,
    sign_head_if_moved,
    sign_tree_every,
)

__all__ = [
    "ENTITY_TABLES",
    "NO_TAPE_SEQ",
    "PRUNED_KIND",
    "RETENTION_SESSION",
    "Checkpoint",
    "EntityWrite",
    "EventDraft",
    "JournalConfig",
    "JournalHead",
    "JournalStats",
    "JournalStore",
    "Lease",
    "PruneOrder",
    "PruneResult",
    "StoredEvent",
    "Subscription",
    "TapePage",
    "VerifyReport",
    "checkpoint_every",
    "export_bundle",
    "prune_older_than",
    "retention_every",
    "sign_head_if_moved",
    "sign_tree_every",
    "verify_bundle",
    "verify_store",
]
