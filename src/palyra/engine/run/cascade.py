"""A run's end takes its delegated descendants with it, in the same append.

The I/O half of ``model.delegation``: when a run that delegated ends cancelled
or failed, its :class:`RunActor` asks :func:`cancelling_descendants` for the
drafts that cancel every descendant still running, and commits them with its
own end. So a crash can never leave a cancelled parent with a running child,
and a reader never sees one without the other.

The walk holds each descendant before it reads that run's children (its work
stopped, nothing started), so no grandchild can be started behind it; then
the pure :func:`cancel_reach` names the runs to end, and each one's end is
staged under its own lock. Locks are taken down the tree only (an ancestor
before its descendants), so two cascades, or a cascade and a child ending on
its own, cannot deadlock.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping

from palyra.engine.model.delegation import cancel_reach, cascade_reason
from palyra.engine.model.lifecycle import RunEvent, is_run_terminal
from palyra.engine.model.records import RUNS, RunRecord, decode
from palyra.engine.run.actor import RunActor
from palyra.engine.run.deps import EngineDeps
from palyra.engine.run.recovery import rebuild
from palyra.engine.run.writer import RunWriter
from palyra.journal import EntityWrite, EventDraft, JournalStore

# Delegation index rows (``meta`` table): ``run_child:<parent run>:<child run>``.
CHILD_INDEX_PREFIX = "run_child:"


def child_runs(store: JournalStore, run_id: str, limit: int = 1000) -> list[str]:
    """Runs ``run_id`` delegated to, in index order (the child ids' order)."""
    prefix = f"{CHILD_INDEX_PREFIX}{run_id}:"
    rows = store.scan_entities("meta", prefix, "", limit)
    return [key[len(prefix):] for key, _raw in rows]


def child_index_write(parent_run_id: str, child_run_id: str) -> EntityWrite:
    """The index row a child run's first commit carries."""
    return EntityWrite("meta", f"{CHILD_INDEX_PREFIX}{parent_run_id}:{child_run_id}", b"1")


@contextlib.asynccontextmanager
async def cancelling_descendants(deps: EngineDeps, actors: Mapping[str, RunActor],
                                 record: RunRecord, event: str
                                 ) -> AsyncIterator[list[EventDraft]]:
    """The drafts that cancel ``record``'s running descendants, for its ending append.

    ``actors`` are the live runs of this process. A descendant with no actor (a
    run parked by a drain, or one whose start landed as its parent was
    stopped) is rebuilt from its tape, as recovery would, so it is ended too.
    The descendants' records move only if the block ends without an error.
    """
    reason = cascade_reason(event)
    ended_as = "cancelled" if event == RunEvent.CANCEL else "failed"
    message = f"cancelled: delegated under run {record.run_id}, which {ended_as}"
    async with contextlib.AsyncExitStack() as stack:
        children: dict[str, list[str]] = {}
        ended: set[str] = set()
        held: dict[str, RunActor] = {}
        frontier = [record.run_id]
        while frontier:
            run_id = frontier.pop(0)
            if run_id in children:
                continue
            children[run_id] = child_runs(deps.store, run_id)
            for child in children[run_id]:
                if child in held or child in ended:
                    continue
                actor = actors.get(child) or await _parked(deps, child)
                if actor is None:
                    ended.add(child)
                else:
                    await stack.enter_async_context(actor.held(reason))
                    if is_run_terminal(actor.record.state):
                        ended.add(child)
                    else:
                        held[child] = actor
                frontier.append(child)
        drafts: list[EventDraft] = []
        for run_id in cancel_reach(record.run_id, children, ended):
            drafts += await stack.enter_async_context(held[run_id].ending_in(reason, message))
        yield drafts


async def _parked(deps: EngineDeps, run_id: str) -> RunActor | None:
    """An actor (never started) over a run with none live, or None if it ended."""
    raw = deps.store.get_entity(RUNS, run_id)
    if raw is None:
        return None
    record = decode(RunRecord, raw)
    if is_run_terminal(record.state):
        return None
    loop = rebuild(deps, run_id)
    loop.state = record.state
    return RunActor(deps, RunWriter(deps.store, record, loop, deps.now_ms))
