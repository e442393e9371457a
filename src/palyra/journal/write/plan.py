"""The pure commit planner: a batch of appends and the chain heads in, every write out.

:func:`plan_commit` lays a batch out as records (one per session, see
:func:`layout`), hashes them onto the chains and returns a :class:`CommitPlan`:
the writes in frame order, the event ids claimed, the ``StoredEvent`` views
each caller is answered with, and the heads after the commit. It reads no
LMDB and does no I/O: the writer resolves every head the batch needs first
(:class:`Heads`) and then frames, answers and applies what the plan says.
Both the journal's writer and any other backend share this one description of
what a commit writes.

The commit's records are also the next entries of the journal's transparency
log (``journal.tlog``): the plan grows the tree from its frontier
(:attr:`Heads.tree`) and writes the new tree rows into ``_tlog`` with the
records, so the tree is durable in the same commit and any backend applying
``ops`` keeps it.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter, itemgetter

from palyra.core.chain import record_body, record_head_of, record_row, text_bytes
from palyra.journal import _env as names
from palyra.journal._types import NO_TAPE_SEQ, EntityWrite, StoredEvent
from palyra.journal.format.record import build_record, scoped_prefix
from palyra.journal.read.tlog import JOURNAL_TREE
from palyra.journal.tlog.merkle import Frontier, extend, tree_prefix
from palyra.journal.write.commitlog import Op
from palyra.journal.write.prepare import PreparedEvent
from palyra.journal.write.requests import Append

MAX_RECORD_EVENTS = 1024
MAX_RECORD_PAYLOAD_BYTES = 1 << 20
"""A record stops growing past either bound, so reading one event never decodes much more."""

# A follower's buffer counts an event as its payload plus this much for the rest.
EVENT_OVERHEAD = 128
# Remembered index prefixes and hashed texts of sessions and runs (a memo of a pure function).
_SCOPE_MEMO = 4096

_U64 = struct.Struct(">Q")
_TREE_PREFIX = tree_prefix(JOURNAL_TREE)
_EVENT, _PAYLOAD = itemgetter(1), attrgetter("payload")  # C calls: no frame per event

Chunk = list[tuple[Append, PreparedEvent]]


@dataclass(slots=True)
class Heads:
    """The chain state a batch is planned against (the planner only reads it).

    ``sessions`` must hold the chain head of every session the batch appends
    to (GENESIS for a new one) and ``tape_next`` the next tape seq of every run
    it puts on a tape (0 for a new one): the planner looks nothing up.
    ``tree`` is the transparency log's frontier before the batch: one entry per
    record so far (a required field: a backend that forgot it would grow a
    wrong tree, and must fail loudly instead).
    """

    next_position: int
    head: bytes
    sessions: Mapping[str, bytes]
    tape_next: Mapping[str, int]
    tree: Frontier


@dataclass(slots=True)
class CommitPlan:
    """Everything one commit writes and answers, in the order it is written.

    Attributes:
        ops: every write in frame order: the id claims, then the records, the
            session index, the tape index and the tree rows, then the entity rows
            in the order their calls were queued.
        claims: ``(event id, u64 position)`` of every event, in position order.
        views: the ``StoredEvent`` of every event, in position order.
        answers: each request's own views, in the order of ``requests`` (a lone
            request's answer is ``views`` itself, not a copy).
        sizes: each view's weight in a follower's bounded buffer.
        sessions: the chain head of every session the commit wrote to.
        tape_next: the next tape seq of every run the commit put on a tape.
        head: the global hash after the commit.
        tree: the transparency log's frontier after the commit.
        next_position: the position after the commit's last event.
        records: records written; ``record_bytes`` their stored size.
        rows: ``(table, key)`` of every entity row written, with the value it holds after
            the commit (None: deleted; the last write of a row wins, as in ``ops``).
        tables: the same writes as ``ops``, by sub-DB, when every one is a put
            (empty when an entity row is deleted): applied a table at a time.
    """

    ops: list[Op]
    claims: list[tuple[bytes, bytes]]
    views: list[StoredEvent]
    answers: list[list[StoredEvent]]
    sizes: list[int]
    sessions: dict[str, bytes]
    tape_next: dict[str, int]
    head: bytes
    tree: Frontier
    next_position: int
    records: int = 0
    record_bytes: int = 0
    rows: dict[tuple[str, str], bytes | None] = field(default_factory=dict)
    tables: dict[str, list[tuple[bytes, bytes]]] = field(default_factory=dict)

    @classmethod
    def empty(cls, head: bytes, tree: Frontier, next_position: int, ops: list[Op]) -> CommitPlan:
        """A commit of no event (a checkpoint's write, a prune that found nothing)."""
        return cls(ops, [], [], [], [], {}, {}, head, tree, next_position)


def plan_commit(requests: Sequence[Append], heads: Heads) -> CommitPlan:
    """Lay ``requests`` out as records on top of ``heads``; pure.

    Raises:
        KeyError: ``heads`` lacks a session or taped run of the batch.
    """
    plan = CommitPlan([], [], [], [], [], {}, {}, heads.head, heads.tree, heads.next_position)
    lone = len(requests) == 1 and len(requests[0].events) == 1
    chunks = [[(requests[0], requests[0].events[0])]] if lone else layout(requests)
    events: list[tuple[bytes, bytes]] = []
    by_session: list[tuple[bytes, bytes]] = []
    tape: list[tuple[bytes, bytes]] = []
    leaves: list[tuple[bytes, int]] = []
    for chunk in chunks:
        _plan_record(plan, heads, chunk, events, by_session, tape, leaves)
    # One request is answered with every view (the usual lone append: no map).
    plan.answers = [plan.views] if len(requests) == 1 else _answers(requests, chunks, plan.views)
    if leaves:
        plan.tree, tree = extend(heads.tree, leaves, _TREE_PREFIX)
        tables = plan.tables
        tables[names.EVENT_IDS] = plan.claims
        tables[names.EVENTS] = events
        tables[names.BY_SESSION] = by_session
        if tape:
            tables[names.TAPE] = tape
        tables[names.TLOG] = tree
        # One comprehension over every table: cheaper than a zip per table, for
        # one write per table (a lone append) and for hundreds alike.
        plan.ops = [(name, key, value) for name, items in tables.items() for key, value in items]
    deletes = False
    for request in requests:  # entity rows in arrival order: the last queued writes last
        for event in request.events:
            if event.entity_writes:
                deletes = _plan_rows(plan, event.entity_writes) or deletes
    if deletes:
        plan.tables.clear()  # a delete keeps the frame's order among the writes: ops only
    return plan


def _plan_rows(plan: CommitPlan, writes: Sequence[EntityWrite]) -> bool:
    """The entity ``writes`` into ``ops``, ``rows`` and (puts) ``tables``; True if one deletes.

    A table's puts keep their queued order in ``tables``, so the last put of a row
    still wins when they are applied a table at a time.
    """
    ops, rows, tables = plan.ops, plan.rows, plan.tables
    deletes = False
    for write in writes:
        key, value = write.key.encode(), write.value
        ops.append((write.table, key, value))
        rows[(write.table, write.key)] = value
        if value is None:
            deletes = True
        else:
            tables.setdefault(write.table, []).append((key, value))
    return deletes


def _answers(
    requests: Sequence[Append], chunks: list[Chunk], views: list[StoredEvent]
) -> list[list[StoredEvent]]:
    """Each request's own views, in the order of ``requests`` (views follow ``chunks``)."""
    # A request is its own key (requests compare by identity): no id() per request.
    owners = [request for chunk in chunks for request, _event in chunk]
    if len(owners) == len(requests):  # as many events as requests (a big batch's usual)
        answer = dict(zip(owners, [[view] for view in views], strict=True))
        if len(answer) == len(requests):  # no request twice: each owns exactly one view
            return [answer[request] for request in requests]
    answer_of: dict[Append, list[StoredEvent]] = {request: [] for request in requests}
    for owner, view in zip(owners, views, strict=True):
        answer_of[owner].append(view)
    return list(answer_of.values())


def _plan_record(
    plan: CommitPlan,
    heads: Heads,
    chunk: Chunk,
    events: list[tuple[bytes, bytes]],
    by_session: list[tuple[bytes, bytes]],
    tape: list[tuple[bytes, bytes]],
    leaves: list[tuple[bytes, int]],
) -> None:
    """One record: its rows, its hashes, its index puts, its tree entry and its events' views."""
    first = plan.next_position
    last = first + len(chunk) - 1
    session_id = chunk[0][1].session_id
    prev = plan.sessions.get(session_id) or heads.sessions[session_id]
    rows: list[list[object]] = []
    claims, tape_next, pack = plan.claims, plan.tape_next, _U64.pack
    tape_last: dict[str, int] = {}
    position = first
    for _request, event in chunk:
        claims.append((event.event_id.encode(), pack(position)))
        position += 1
        seq = NO_TAPE_SEQ
        if event.tape:
            run_id = event.run_id
            seq = tape_next.get(run_id, -1)
            if seq < 0:
                seq = heads.tape_next[run_id]
            tape_next[run_id] = seq + 1
            tape_last[run_id] = seq
        rows.append(record_row(event, seq, event.redactions, event.payload))
    session_prefix, session_text = _scope(session_id)
    value, digest, link = build_record(
        record_head_of(prev, first, len(chunk), session_text), record_body(rows), plan.head, last
    )
    last_key = pack(last)
    leaves.append((digest, last))
    events.append((last_key, value))
    by_session.append((session_prefix + last_key, b""))
    for run_id, seq in tape_last.items():
        tape.append((_scope(run_id)[0] + pack(seq), last_key))
    digest_hex, prev_hex, link_hex = digest.hex(), prev.hex(), link.hex()
    views, sizes = plan.views, plan.sizes
    for position, ((_request, event), row) in enumerate(zip(chunk, rows, strict=True), first):
        views.append(StoredEvent(
            position, event.event_id, session_id, event.run_id, row[2], event.kind,  # type: ignore[arg-type]
            event.actor, event.ts_ms, event.principal, event.device_id, event.channel,
            event.value, row[9], digest_hex, prev_hex, link_hex, event.origin,  # type: ignore[arg-type]
        ))  # fmt: skip
        sizes.append(len(event.payload) + EVENT_OVERHEAD)
    plan.sessions[session_id] = digest
    plan.head = link
    plan.next_position = last + 1
    plan.records += 1
    plan.record_bytes += len(value)


@lru_cache(maxsize=_SCOPE_MEMO)
def _scope(scope: str) -> tuple[bytes, bytes]:
    """``(scoped_prefix(scope), text_bytes(scope))``: index key prefix and hashed text."""
    return scoped_prefix(scope), text_bytes(scope)


def layout(appends: Sequence[Append]) -> list[Chunk]:
    """The records of one commit, in position order.

    The events of every request whose events share one session join that
    session's record, in arrival order (concurrent requests have no order
    among themselves, so gathering a session's events moves nothing a caller
    can rely on); a request spanning sessions keeps its order and gets one
    record per run of same-session events. A record is cut after
    ``MAX_RECORD_EVENTS`` events or ``MAX_RECORD_PAYLOAD_BYTES`` of payload;
    a request's events stay at consecutive positions either way.
    """
    if len(appends) == 1 and len(appends[0].events) == 1:  # a lone append: one record
        return [[(appends[0], appends[0].events[0])]]
    groups: list[Chunk] = []
    by_session: dict[str, Chunk] = {}
    for request in appends:
        events = request.events
        session_id = events[0].session_id
        # One event (most requests of a big batch): no generator to run per event.
        if len(events) == 1 or all(event.session_id == session_id for event in events):
            group = by_session.get(session_id)
            if group is None:
                group = by_session[session_id] = []
                groups.append(group)
            if len(events) == 1:
                group.append((request, events[0]))
            else:
                group += [(request, event) for event in events]
            continue
        run: Chunk = []
        for event in events:
            if run and event.session_id != run[-1][1].session_id:
                groups.append(run)
                run = []
            run.append((request, event))
        groups.append(run)
    return [chunk for group in groups for chunk in _cut(group)]


def _cut(group: Chunk) -> list[Chunk]:
    """``group`` in records of at most the event and payload bounds."""
    if len(group) == 1:
        return [group]
    small = MAX_RECORD_PAYLOAD_BYTES // MAX_RECORD_EVENTS
    if len(group) <= MAX_RECORD_EVENTS and max(map(len, map(_PAYLOAD, map(_EVENT, group)))) <= small:
        return [group]  # cannot reach either bound: one record, bytes uncounted
    chunks: list[Chunk] = []
    chunk: Chunk = []
    size = 0
    for item in group:
        if chunk and (len(chunk) >= MAX_RECORD_EVENTS or size >= MAX_RECORD_PAYLOAD_BYTES):
            chunks.append(chunk)
            chunk, size = [], 0
        chunk.append(item)
        size += len(item[1].payload)
    chunks.append(chunk)
    return chunks
