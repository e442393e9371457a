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
    RowExpectation,
    StoredEvent,
    TapePage,
)
from palyra.journal.fencing import fenced_writes
from palyra.journal.format.record import PRUNED_KIND, RETENTION_SESSION, decode_record
from palyra.journal.read.bundle import export_bundle
from palyra.journal.read.follow import Subscription
from palyra.journal.read.locate import position_of
from palyra.journal.retention.policy import prune_older_than, retention_every
from palyra.journal.retention.prune import PruneOrder, PruneResult
from palyra.journal.tlog.merkle import verify_consistency
from palyra.journal.tlog.note import (
    NoteError,
    Witness,
    check_name,
    parse_checkpoint,
    parse_note,
    verify_checkpoint,
    witnesses,
)
from palyra.journal.tlog.proof import verify_proof
from palyra.journal.tlog.session_proofs import verify_lines
from palyra.journal.tlog.tiles import parse_tile_path
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
    "NoteError",
    "PruneOrder",
    "PruneResult",
    "RowExpectation",
    "StoredEvent",
    "Subscription",
    "TapePage",
    "VerifyReport",
    "Witness",
    "check_name",
    "checkpoint_every",
    "decode_record",
    "export_bundle",
    "fenced_writes",
    "parse_checkpoint",
    "parse_note",
    "parse_tile_path",
    "position_of",
    "prune_older_than",
    "retention_every",
    "sign_head_if_moved",
    "sign_tree_every",
    "verify_bundle",
    "verify_checkpoint",
    "verify_consistency",
    "verify_lines",
    "verify_proof",
    "verify_store",
    "witnesses",
]
