"""Retention policy: prune records older than a maximum age, in bounded batches.

The daemon calls :func:`retention_every` when ``retention_max_age_days`` is
set; ``palyra journal prune`` calls :func:`prune_older_than` once. Each batch
is one durable commit through the writer (see ``retention.prune``), so a crash leaves
every record either whole or a tombstone, and appends interleave with a long
prune instead of waiting behind it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal._store import JournalStore
from palyra.journal.retention.prune import PruneOrder, PruneResult


async def prune_older_than(
    store: JournalStore,
    max_age_ms: int,
    *,
    live_runs: Callable[[], frozenset[str]] = frozenset,
    batch_records: int = 512,
    now_ms: int | None = None,
    through: int | None = None,
) -> PruneResult:
    """Prune the prefix of records whose events are all older than ``max_age_ms``.

    ``live_runs`` returns the runs that are not terminal (their records stay);
    it is asked once, *after* the head is read: a run that starts after that
    read has every event past the head, where no prune reaches, and one that
    started before it is in the runs table by then (its row commits with its
    first event). ``through`` bounds the prune further (a position). Returns
    the total.
    """
    now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    # The newest record as of now always stays (later batches' own
    # journal.pruned events must not make it prunable).
    head = store.head().count - 1
    live = live_runs()
    order = PruneOrder(before_ms=now_ms - max_age_ms,
                       through=head if through is None else min(through, head),
                       live_runs=live, max_records=max(1, batch_records))
    first = records = events = freed = position = 0
    last, at = store.pruned_through(), ""
    while True:
        batch = await store.prune_batch(order)
        if batch.records == 0:
            at = at or batch.head_hash
            break
        first = first or batch.first
        last, at, position = batch.through, batch.head_hash, batch.position
        records += batch.records
        events += batch.events
        freed += batch.bytes_freed
    return PruneResult(first, last, records, events, freed, at, position)


async def retention_every(
    store: JournalStore,
    max_age_ms: int,
    interval_s: float,
    *,
    live_runs: Callable[[], frozenset[str]] = frozenset,
    batch_records: int = 512,
    on_pruned: Callable[[PruneResult], None] = lambda result: None,
    on_error: Callable[[PalyraError], None] | None = None,
    then: Callable[[], Awaitable[object]] | None = None,
) -> None:
    """Prune every ``interval_s`` seconds (first right away); runs until cancelled.

    ``then`` runs after every pass (the daemon drops the attachments no retained
    tape names any more); its ``PalyraError`` goes to ``on_error`` like a prune's.

    Ends when the store closes. A failed prune is handed to ``on_error`` (the
    daemon logs it and tries again next interval: retention must not take the
    daemon down); without one it is raised.
    """
    while True:
        try:
            result = await prune_older_than(store, max_age_ms, live_runs=live_runs,
                                            batch_records=batch_records)
        except PalyraError as exc:
            if exc.code is ErrorCode.UNAVAILABLE and store.closed:
                return
            if on_error is None:
                raise
            on_error(exc)
        else:
            if result.records:
                on_pruned(result)
            if then is not None:
                try:
                    await then()
                except PalyraError as exc:
                    if on_error is None:
                        raise
                    on_error(exc)
        await asyncio.sleep(interval_s)
