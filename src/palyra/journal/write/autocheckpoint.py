"""Signed checkpoints taken by a running daemon.

A live journal can only prove that its newest events were not cut off if a
signed checkpoint vouches for a later head (docs/journal/format.md). So the daemon
signs the head periodically while events arrive, and once more when it stops.
"""

from __future__ import annotations

import asyncio

import structlog

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal._store import JournalStore
from palyra.journal._types import Checkpoint


async def sign_head_if_moved(store: JournalStore) -> Checkpoint | None:
    """Sign the current head unless it is empty or already vouched for."""
    count = store.head().count
    if count == 0:
        return None
    existing = store.checkpoints()
    if existing and existing[-1].position >= count:
        return None
    return await store.checkpoint()


async def checkpoint_every(store: JournalStore, interval_s: float) -> None:
    """Sign the head every ``interval_s`` seconds when it moved; runs until cancelled."""
    while True:
        await asyncio.sleep(interval_s)
        await sign_head_if_moved(store)


_log = structlog.get_logger("palyra.journal")

TREE_CHECKPOINT_INTERVAL_S = 1.0
"""A transparency-log checkpoint follows an append by at most this long (plus one signing)."""


async def sign_tree_every(store: JournalStore, interval_s: float = TREE_CHECKPOINT_INTERVAL_S,
                          origin: str | None = None) -> None:
    """Sign the transparency log whenever its tree grew; runs until cancelled.

    A refusal (``JOURNAL_CORRUPT``: the stored tree does not extend the signed
    checkpoint) is logged each time the tree grows and nothing is signed: the
    journal keeps serving (its chain is unaffected) while ``journal verify``
    names the damage; signing a fork instead would be undetectable later.
    """
    signed = -1
    while True:
        await asyncio.sleep(interval_s)
        size = store.tree_size()
        if size != signed and size > 0:
            try:
                await store.sign_tree(origin)
            except PalyraError as exc:
                if exc.code is not ErrorCode.JOURNAL_CORRUPT:
                    raise
                _log.error("tlog_sign_refused", reason=exc.message, tree_size=size)
            signed = size
