"""The journal: one append-only, hash-chained event log in LMDB, with indexes and entity tables.

See ``docs/journal.md`` for the storage layout, the hash chain byte layout and
the bundle format.
"""

from palyra.journal._autocheckpoint import checkpoint_every, sign_head_if_moved
from palyra.journal._bundle import export_bundle
from palyra.journal._follow import Subscription
from palyra.journal._prune import PRUNED_KIND, RETENTION_SESSION, PruneOrder, PruneResult
from palyra.journal._retention import prune_older_than, retention_every
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
    StoredEvent,
    TapePage,
)
from palyra.journal._verify import VerifyReport, verify_bundle, verify_store

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
    "verify_bundle",
    "verify_store",
]
