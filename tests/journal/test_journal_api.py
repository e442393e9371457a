"""The public surface other packages build against (docs/architecture.md "Journal")."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import palyra.journal as journal
from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal import EventDraft, JournalStore, StoredEvent


def test_exports() -> None:
    assert set(journal.__all__) == {
        "ENTITY_TABLES", "NO_TAPE_SEQ", "Checkpoint", "EntityWrite", "EventDraft",
        "JournalConfig", "JournalHead", "JournalStats", "JournalStore", "StoredEvent", "Subscription",
        "TapePage", "VerifyReport", "checkpoint_every", "export_bundle", "sign_head_if_moved",
        "sign_tree_every",
        "verify_bundle", "verify_store", "PRUNED_KIND", "RETENTION_SESSION", "PruneOrder",
        "PruneResult", "prune_older_than", "retention_every", "Lease", "RowExpectation", "fenced_writes",
        # The transparency log's formats and proofs, for the CLI, the app and config.
        "NoteError", "Witness", "check_name", "decode_record", "parse_checkpoint", "parse_note", "parse_tile_path",
        "position_of", "verify_checkpoint", "verify_consistency", "verify_lines",
        "verify_proof", "witnesses",
    }  # fmt: skip


def test_signatures() -> None:
    def params(fn: object) -> list[str]:
        return list(inspect.signature(fn).parameters)  # type: ignore[arg-type]

    assert params(JournalStore.open) == ["data_dir", "config"]
    assert params(JournalStore.read_tape) == ["self", "run_id", "after_seq", "limit", "max_bytes"]
    assert inspect.signature(JournalStore.read_tape).parameters["after_seq"].default == -1
    assert params(JournalStore.scan_entities) == ["self", "table", "prefix", "after_key", "limit"]
    assert params(EventDraft) == [
        "kind", "actor", "session_id", "run_id", "tape", "payload", "principal", "device_id",
        "channel", "event_id", "ts_ms", "entity_writes", "origin",
    ]  # fmt: skip
    assert inspect.iscoroutinefunction(JournalStore.append)
    assert {"position", "tape_seq", "payload", "redactions", "hash", "prev_hash"} <= set(
        StoredEvent.__struct_fields__
    )
    assert {
        "sessions", "runs", "approvals", "tasks", "memory", "agents", "channels", "meta",
    } == journal.ENTITY_TABLES  # fmt: skip


async def test_reads_after_close_are_unavailable(data_dir: Path) -> None:
    store = JournalStore.open(data_dir)
    store.close()
    with pytest.raises(PalyraError) as info:
        store.head()
    assert info.value.code is ErrorCode.UNAVAILABLE
