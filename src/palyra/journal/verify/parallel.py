"""``journal verify`` on several processes: the chain and the tree checked in segments.

The parent reads the log in segments of :data:`~palyra.journal.verify.storewalk.CHUNK`
records (one chunk of the serial walk, and one aligned block of the transparency
log's tree), each in a read transaction of its own, with the segment's level-0 tree
rows, and hands their bytes to a pool of worker processes. A worker checks a segment
as a pure function of those bytes (``verify.segment``: its records' hashes and
links, its tree rows, and the tree nodes inside its block). The parent joins the
segments in log order: the seam of each (first position, first link, each
session's first ``prev_hash``), the signed checkpoints and compactions in it, and
its block's root and tile nodes into the tree.

Whatever a worker or a seam does not pass is not judged here: the parent walks
that segment with the serial walk (``verify.storewalk``) from the state it has
there, which is the state a serial verify has at that record, so a failure is
reported exactly as one process reports it (the same record, field and order).
The records after the last whole segment are walked serially too.

Workers do not open the environment themselves: a read transaction cannot cross
processes, and py-lmdb refuses to open, in a forked worker, an environment its
parent holds open (its guard against opening one environment twice in a process is
inherited through ``fork``), while a worker started fresh pays ~0.3 s of CPU
importing the journal before it hashes anything. Handing the bytes over costs the
parent a copy per segment (its read it does anyway), about a tenth of the hashing.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass
from itertools import islice
from multiprocessing.pool import AsyncResult, Pool

from palyra.journal import _env as names
from palyra.journal.format.record import key_u64, u64_key
from palyra.journal.postgres.kv import PostgresEnv
from palyra.journal.read.tlog import JOURNAL_TREE
from palyra.journal.tlog.merkle import fold, fold_block, tree_prefix
from palyra.journal.verify.chainwalk import Tampered
from palyra.journal.verify.covers import MARKER
from palyra.journal.verify.segment import Segment, check_segment
from palyra.journal.verify.storewalk import CHUNK, StoreWalk, check_covers
from palyra.journal.verify.tree import rows_match

MIN_SEGMENTS = 16
"""Below this many whole segments (of 4,096 records each) one process does the walk.
Forking two workers costs the parent ~10 ms (profiled), and 16 segments take the serial
walk 0.1 s (one-event records) to 0.6 s (records of ~8 events), so the start-up stays
under a tenth of what is shared out. A reasoned bound, not a measured crossover: on cores
already busy with other work no process count beats one, whatever the journal's length."""

_AHEAD = 2
"""Segments in flight per worker: enough to keep every worker busy while the parent
joins, few enough that memory stays bounded (a segment's bytes) on any journal."""


@dataclass(frozen=True, slots=True)
class _Task:
    """One segment: its records' bytes and what the worker checks them against."""

    records: list[tuple[bytes, bytes]]
    start: int  # the tree index of its first record
    rows: tuple[list[bytes], bytes | None] | None  # stored level-0 rows (None: past the tree)
    asked: tuple[int, ...]  # signed checkpoints' positions it may hold
    signed_at: int  # the signed tree size less ``start`` when inside the block, else 0


def walk_parallel(walk: StoreWalk, jobs: int) -> None:
    """Walk the whole segments of the log on ``jobs`` processes (see the module).

    Leaves ``walk`` where a serial walk would be after them; the caller walks the rest.

    Raises:
        Tampered: what the serial walk of a segment that did not pass raises.
    """
    tree, verifier = walk.tree, walk.verifier
    # On PostgreSQL the rows come over one connection: one process reads them.
    if tree is None or verifier.position or tree.checked or isinstance(walk.env, PostgresEnv):
        return
    with walk.env.read() as txn:
        records = txn.stat(walk.env.dbs[names.EVENTS])["entries"]
    if records // CHUNK < MIN_SEGMENTS:
        return
    context = multiprocessing.get_context(
        # fork is the cheapest start, and safe only with no other thread to copy mid-way.
        "fork" if threading.active_count() == 1 else "forkserver")
    pool = context.Pool(jobs)  # its workers start here, before its threads do
    tasks = _tasks(walk)
    results = _in_order(pool, tasks, jobs * _AHEAD)
    try:
        for task, segment in results:
            if not _join(walk, task, segment):
                walk.walk(below=task.records[-1][0] + b"\x00")  # keys up to its last
    finally:
        results.close()
        tasks.close()
        pool.terminate()  # nothing left to wait for: results in flight are not needed
        pool.join()


def _tasks(walk: StoreWalk) -> Generator[_Task, None, None]:
    """The whole segments from the start, read one transaction each (see the module)."""
    tree, env = walk.tree, walk.env
    assert tree is not None  # walk_parallel runs only with a tree
    signed, start, after = tree.signed_size, 0, u64_key(1)
    previous = 0  # the last position of the segment before
    while True:
        with env.read() as txn:
            cursor = txn.cursor(db=env.dbs[names.EVENTS])
            records = list(islice(iter(cursor), CHUNK)) if cursor.set_range(after) else []
            if len(records) < CHUNK:
                return  # the rest is the serial walk's
            room = tree.size - start
            rows = tree.read_rows(txn, start, CHUNK) if room >= CHUNK else None
        last_key = records[-1][0]
        last = key_u64(last_key) if len(last_key) == 8 else previous
        asked = tuple(c.position for c in walk.pending if previous < c.position <= last)
        inside = signed - start if start < signed < start + CHUNK else 0
        yield _Task(records, start, rows, asked, inside)
        start, after, previous = start + CHUNK, last_key + b"\x00", max(previous, last)


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
    if not (segment.ok and (segment.tree_ok or room <= 0) and room not in range(1, CHUNK)
            and verifier.joins(segment)):  # fmt: skip
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
    """In a worker: check one segment's records and, inside the tree, its block."""
    segment = check_segment(task.records, marker=MARKER, asked=task.asked)
    if segment.ok and task.rows is not None and rows_match(segment.rows, task.rows):
        prefix, start, cut = tree_prefix(JOURNAL_TREE), task.start, task.signed_at
        hashes = [row[:32] for row in segment.rows]
        roots, nodes = fold_block(hashes[:cut] if cut else hashes, start, prefix)
        if cut:  # the roots of the leaves before the signed size, then the rest folded on
            segment.signed_roots = list(roots)
            nodes += fold(roots, start + cut, hashes[cut:], prefix, detached=True)
        segment.roots, segment.nodes, segment.tree_ok = roots, nodes, True
    segment.rows = []  # compared here: not sent back
    return segment
