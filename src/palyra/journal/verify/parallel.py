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

The workers are forked before the parent opens the journal (:func:`worker_pool`,
from ``verify_store`` given a data dir), and each opens the environment read-only
on its own: py-lmdb refuses to open, in a forked process, an environment its parent
holds open (its guard against opening one environment twice in a process is
inherited through ``fork``); closing the inherited one in the worker would free the
parent's reader slots; a read transaction on the inherited one takes a reader slot
under the parent's process id that the worker cannot free; and a worker started
fresh pays ~0.3 s of CPU importing the journal before it hashes anything. A caller
that passes an open store, or runs other threads (fork copies a process mid-way
through whatever they do), is verified by one process.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections import deque
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from multiprocessing.util import Finalize
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lmdb

from palyra.journal import _env as names
from palyra.journal._env import journal_dir
from palyra.journal.format.record import key_u64, u64_key
from palyra.journal.read.tlog import JOURNAL_TREE
from palyra.journal.tlog.merkle import fold, fold_block, tree_prefix
from palyra.journal.verify.chainwalk import Tampered
from palyra.journal.verify.covers import MARKER
from palyra.journal.verify.segment import Segment, check_segment
from palyra.journal.verify.storewalk import CHUNK, StoreWalk, check_covers
from palyra.journal.verify.tree import ROW_SIZE, rows_match, stored_rows

if TYPE_CHECKING:  # the pool is made by the multiprocessing context (``worker_pool``)
    from multiprocessing.pool import AsyncResult, Pool

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


_MIN_BYTES = MIN_SEGMENTS * CHUNK * 128
"""A data file smaller than this cannot hold :data:`MIN_SEGMENTS` segments (a record
takes more than 128 bytes), so no workers are started for it."""


@contextmanager
def worker_pool(data_dir: Path, jobs: int) -> Iterator[Pool | None]:
    """Workers for :func:`walk_parallel`, forked now: before the caller opens the journal.

    None when they could not help: one job, a data file too small to hold
    :data:`MIN_SEGMENTS` segments, or other threads running (fork copies a process
    mid-way through whatever they do). Each worker opens the environment read-only
    on its own (see the module) and closes it when the pool is closed.
    """
    data = journal_dir(data_dir) / "data.mdb"
    if (jobs < 2 or not _alone() or not data.is_file()
            or data.stat().st_size < _MIN_BYTES):  # fmt: skip
        yield None
        return
    pool = multiprocessing.get_context("fork").Pool(jobs, _open_in_worker, (data_dir,))
    try:
        yield pool
    except BaseException:
        pool.terminate()  # results in flight are not needed
        raise
    else:
        pool.close()  # the workers close their environments as they exit
    finally:
        pool.join()


def _alone() -> bool:
    """No other thread runs here: a fork copies the process mid-way through whatever
    other threads do (a lock one of them holds stays held in the child)."""
    return threading.active_count() == 1


def walk_parallel(walk: StoreWalk, pool: Pool | None, jobs: int) -> None:
    """Walk the whole segments of the log on the ``jobs`` workers of ``pool`` (see the module).

    Leaves ``walk`` where a serial walk would be after them; the caller walks the rest.

    Raises:
        Tampered: what the serial walk of a segment that did not pass raises.
    """
    tree, verifier = walk.tree, walk.verifier
    # LMDB's own environment only (PostgreSQL's subclasses it, and is not imported
    # here: a daemon on LMDB keeps psycopg out of its memory): on PostgreSQL the rows
    # come over one connection, so one process reads them.
    if (pool is None or tree is None or verifier.position or tree.checked
            or type(walk.env) is not names.JournalEnv or tree.size // CHUNK < MIN_SEGMENTS):  # fmt: skip
        return
    tasks = _tasks(walk)
    results = _in_order(pool, tasks, jobs * _AHEAD)
    try:
        for task, segment in results:
            if not _join(walk, task, segment):
                walk.walk(below=task.bound + b"\x00")  # keys up to its last
    finally:
        results.close()
        tasks.close()


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


_worker: tuple[Any, Any, Any, bytes] | None = None
"""In a worker: its environment, the events and tree tables, and the tree's level-0
key prefix; None if the environment could not be opened (its segments are then left
to the parent's serial walk)."""


def _open_in_worker(data_dir: Path) -> None:
    """A worker's start: open the journal read-only, and close it when the worker exits."""
    global _worker
    try:
        env = lmdb.open(str(journal_dir(data_dir)), subdir=True, readonly=True, max_dbs=2,
                        readahead=False)  # fmt: skip
        tables = env.open_db(names.EVENTS.encode()), env.open_db(names.TLOG.encode())
    except lmdb.Error:
        return
    _worker = (env, *tables, tree_prefix(JOURNAL_TREE) + b"\x00")
    Finalize(None, env.close, exitpriority=0)  # on a clean exit (the pool closed)


def _check(task: _Task) -> Segment:
    """In a worker: read one segment and check its records and, inside the tree, its block."""
    if _worker is None:
        return Segment(ok=False)
    env, events, tlog, level0 = _worker
    try:
        txn = env.begin(buffers=False)
    except lmdb.MapResizedError:  # a writer grew the map: adopt its size, and retry once
        env.set_mapsize(0)
        txn = env.begin(buffers=False)
    try:
        cursor = txn.cursor(db=events)
        records = list(islice(iter(cursor), CHUNK)) if cursor.set_range(task.after) else []
        if len(records) < CHUNK or records[-1][0] != task.bound:
            return Segment(ok=False)
        segment = check_segment(records, marker=MARKER, asked=task.asked)
        if segment.ok and rows_match(segment.rows,
                                     stored_rows(txn, tlog, level0, task.start, CHUNK)):  # fmt: skip
            prefix, start, cut = level0[:-1], task.start, task.signed_at
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
