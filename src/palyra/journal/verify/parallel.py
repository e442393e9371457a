"""``journal verify`` on several processes: the chain and the tree checked in segments.

The log is cut into segments of :data:`~palyra.journal.verify.storewalk.CHUNK`
records (one chunk of the serial walk, and one aligned block of the transparency
log's tree). The parent only names each segment: the key its records start at and
the key of its last record, which the tree's level-0 row at the block's last index
gives (one read per segment). A pool of worker processes reads each segment itself,
in a read transaction of its own, with the block's level-0 tree rows, and checks it
as a pure function of those bytes (``verify.segment``: its records' hashes and
links, its tree rows, and the tree nodes inside its block). The parent joins the
summaries in log order: the seam of each (first position, first link, each
session's first ``prev_hash``), the signed checkpoints and compactions in it, and
its block's root and tile nodes into the tree.

Whatever a worker or a seam does not pass is not judged here: the parent walks
that segment with the serial walk (``verify.storewalk``) from the state it has
there, which is the state a serial verify has at that record, so a failure is
reported exactly as one process reports it (the same record, field and order). A
row that names a wrong bound only makes segments fail to join: a block joins the
tree only where the tree checked so far ends. The records after the tree's last
whole block are walked serially too.

The workers are forked with the parent's environment open and read through it.
py-lmdb refuses to open, in a forked process, an environment its parent holds open
(LMDB's locks belong to a process, and the guard is inherited), closing the inherited
one in the worker would free the parent's reader slots, and a worker started fresh
pays ~0.3 s of CPU importing the journal before it hashes anything. Reading through
the inherited environment is sound for read transactions: a worker's reader slot
carries the parent's process id, which is alive for as long as the worker reads (the
parent ends the pool before it returns), and a slot a killed worker leaves is freed
when the parent closes the environment. The one hazard is the transaction py-lmdb
caches for reuse: a worker that renewed the parent's cached one would share its
reader slot, so the parent holds that transaction open while the pool forks. A
parent with other threads does not fork (a thread could be inside LMDB mid-way): it
walks serially.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass
from itertools import islice
from multiprocessing.pool import AsyncResult, Pool

import lmdb

from palyra.journal import _env as names
from palyra.journal._env import JournalEnv
from palyra.journal.format.record import key_u64, u64_key
from palyra.journal.postgres.kv import PostgresEnv
from palyra.journal.tlog.merkle import fold, fold_block
from palyra.journal.verify.chainwalk import Tampered
from palyra.journal.verify.covers import MARKER
from palyra.journal.verify.segment import Segment, check_segment
from palyra.journal.verify.storewalk import CHUNK, StoreWalk, check_covers
from palyra.journal.verify.tree import ROW_SIZE, TreeCheck, rows_match

MIN_SEGMENTS = 16
"""Below this many whole segments (of 4,096 records each) one process does the walk.
Starting a pool of two forked workers and stopping it costs ~15 ms of CPU (parent and
workers, measured), and 16 segments take the serial walk 0.1 s (one-event records) to
0.6 s (records of ~8 events), so the start-up stays under a tenth of what is shared
out. Below that it does not pay: ``bench journal``'s 30,720 events are ~4,200 records
(one segment), which the serial walk checks in ~26 ms of CPU. A reasoned bound, not a
measured crossover: on cores already busy with other work no process count beats one,
whatever the journal's length."""

_AHEAD = 2
"""Segments in flight per worker: enough to keep every worker busy while the parent
joins, few enough that memory stays bounded (a segment's bytes) on any journal."""


@dataclass(frozen=True, slots=True)
class _Task:
    """One segment: where its records are and what the worker checks them against."""

    after: bytes  # the key its first record is at or after
    bound: bytes  # its last record's key, as the tree's row names it
    start: int  # the tree index of its first record
    asked: tuple[int, ...]  # signed checkpoints' positions it may hold
    signed_at: int  # the signed tree size less ``start`` when inside the block, else 0


_shared: tuple[JournalEnv, TreeCheck] | None = None
"""The open environment and tree check, set in the parent just before the workers fork
and inherited by them (see the module); None outside a parallel walk."""


def walk_parallel(walk: StoreWalk, jobs: int) -> None:
    """Walk the whole segments of the log on ``jobs`` processes (see the module).

    Leaves ``walk`` where a serial walk would be after them; the caller walks the rest.

    Raises:
        Tampered: what the serial walk of a segment that did not pass raises.
    """
    global _shared
    tree, verifier = walk.tree, walk.verifier
    # On PostgreSQL the rows come over one connection: one process reads them. Workers
    # read through the parent's environment, so they must be forked (see the module).
    if (tree is None or verifier.position or tree.checked or isinstance(walk.env, PostgresEnv)
            or tree.size // CHUNK < MIN_SEGMENTS or threading.active_count() > 1):  # fmt: skip
        return
    _shared = (walk.env, tree)
    try:
        # The parent's cached read transaction is checked out while the workers fork, so
        # none of them can renew it: each takes a reader slot of its own.
        with walk.env.read():
            pool = multiprocessing.get_context("fork").Pool(jobs)
    finally:
        _shared = None  # the parent's reference only: the workers hold their copies
    tasks = _tasks(walk)
    results = _in_order(pool, tasks, jobs * _AHEAD)
    try:
        for task, segment in results:
            if not _join(walk, task, segment):
                walk.walk(below=task.bound + b"\x00")  # keys up to its last
    finally:
        results.close()
        tasks.close()
        pool.terminate()  # nothing left to wait for: results in flight are not needed
        pool.join()


def _tasks(walk: StoreWalk) -> Generator[_Task, None, None]:
    """The tree's whole blocks from the start, their bounds read from its level-0 rows."""
    tree, env = walk.tree, walk.env
    assert tree is not None  # walk_parallel runs only with a tree
    signed, after, previous = tree.signed_size, u64_key(1), 0
    for start in range(0, tree.size - CHUNK + 1, CHUNK):
        with env.read() as txn:
            row = tree.read_row(txn, start + CHUNK - 1)
        if row is None or len(row) != ROW_SIZE:
            return  # the serial walk names what is wrong with the tree here
        bound = row[ROW_SIZE - 8 :]
        last = key_u64(bound)
        asked = tuple(c.position for c in walk.pending if previous < c.position <= last)
        inside = signed - start if start < signed < start + CHUNK else 0
        yield _Task(after, bound, start, asked, inside)
        after, previous = bound + b"\x00", max(previous, last)


def _in_order(pool: Pool, tasks: Generator[_Task, None, None], ahead: int
              ) -> Generator[tuple[_Task, Segment], None, None]:  # fmt: skip
    """The segments' results in order, with at most ``ahead`` submitted and not taken."""
    waiting: deque[tuple[_Task, AsyncResult[Segment]]] = deque()
    for task in islice(tasks, ahead):
        waiting.append((task, pool.apply_async(_check, (task,))))
    while waiting:
        task, result = waiting.popleft()
        for more in islice(tasks, 1):
            waiting.append((more, pool.apply_async(_check, (more,))))
        yield task, result.get()


def _join(walk: StoreWalk, task: _Task, segment: Segment) -> bool:
    """Take in a segment a worker passed, if it joins here; else change nothing."""
    verifier, tree = walk.verifier, walk.tree
    assert tree is not None  # walk_parallel runs only with a tree
    room = tree.room  # a segment the tree's end cuts is the serial walk's (it cuts there)
    # Inside the tree, a block joins only where the tree checked so far ends (a serial
    # walk up to a bound that a bad row gave may have ended elsewhere).
    if not (segment.ok and (segment.tree_ok or room <= 0) and room not in range(1, CHUNK)
            and (room <= 0 or tree.checked == task.start) and verifier.joins(segment)):  # fmt: skip
        return False
    # Checkpoints and compactions in it are checked as the serial walk would; any
    # failure is left to the serial walk to name, from the state before the segment.
    saved = (verifier.position, verifier.head, verifier.checkpoints, verifier.signed_through,
             list(walk.pending))  # fmt: skip
    try:
        while walk.pending and walk.pending[0].position <= segment.last:
            stop = segment.stops.get(walk.pending[0].position)
            if stop is None:
                raise Tampered(None, "a checkpoint the worker was not asked for")
            verifier.position, verifier.head = stop
            walk.check_checkpoints(verifier.position)
        verifier.position = segment.last
        walk.covering += segment.noted
        check_covers(walk.env, walk.covering, segment.last + 1)
        if room > 0:
            with walk.env.read() as txn:
                if not tree.join(txn, CHUNK, segment.roots, segment.signed_roots,
                                 segment.nodes, segment.last):  # fmt: skip
                    raise Tampered(None, "the tree: left to the serial walk to name")
    except Tampered:
        (verifier.position, verifier.head, verifier.checkpoints, verifier.signed_through,
         walk.pending) = saved  # fmt: skip
        walk.covering.clear()
        return False
    start = verifier.position = saved[0]
    verifier.take(segment)
    if walk.progress is not None:
        list(map(walk.progress, range(start + 1, segment.last + 1)))
    return True


def _check(task: _Task) -> Segment:
    """In a worker: read one segment and check its records and, inside the tree, its block."""
    assert _shared is not None  # set by the parent before it forked this worker
    env, tree = _shared
    try:
        txn = env.env.begin(buffers=False)  # the inherited environment (see the module)
    except lmdb.MapResizedError:  # another process grew the map: the parent walks it
        return Segment(ok=False)
    try:
        cursor = txn.cursor(db=env.dbs[names.EVENTS])
        records = list(islice(iter(cursor), CHUNK)) if cursor.set_range(task.after) else []
        if len(records) < CHUNK or records[-1][0] != task.bound:
            return Segment(ok=False)
        segment = check_segment(records, marker=MARKER, asked=task.asked)
        if segment.ok and rows_match(segment.rows, tree.read_rows(txn, task.start, CHUNK)):
            prefix, start, cut = tree.prefix, task.start, task.signed_at
            hashes = [row[:32] for row in segment.rows]
            roots, nodes = fold_block(hashes[:cut] if cut else hashes, start, prefix)
            if cut:  # the roots of the leaves before the signed size, then the rest folded on
                segment.signed_roots = list(roots)
                nodes += fold(roots, start + cut, hashes[cut:], prefix, detached=True)
            segment.roots, segment.nodes, segment.tree_ok = roots, nodes, True
    finally:
        txn.abort()
    segment.rows = []  # compared here: not sent back
    return segment
