"""The pure commit planner (``write.plan``): records, hashes, writes and answers from data alone."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from palyra.core.chain import GENESIS, record_body, record_hash, record_head, record_row
from palyra.journal import EntityWrite, JournalConfig
from palyra.journal._env import BY_SESSION, EVENT_IDS, EVENTS, TAPE, TLOG
from palyra.journal.format.record import decode_record, scoped_key, u64_key
from palyra.journal.read.tlog import JOURNAL_TREE
from palyra.journal.tlog.merkle import (
    Frontier,
    MemoryTree,
    extend,
    leaf_hash,
    node_key,
    root_at,
    tree_prefix,
)
from palyra.journal.write.plan import (
    EVENT_OVERHEAD,
    MAX_RECORD_EVENTS,
    Heads,
    layout,
    plan_commit,
)
from palyra.journal.write.prepare import prepare
from palyra.journal.write.requests import Append

from .helpers import draft

_CONFIG = JournalConfig()


def _append(*drafts: Any) -> Append:
    loop = asyncio.new_event_loop()
    try:
        return Append(loop, loop.create_future(), prepare(list(drafts), _CONFIG))
    finally:
        loop.close()


def _heads(**sessions: bytes) -> Heads:
    return Heads(1, GENESIS, {"s": GENESIS, "t": GENESIS, **sessions}, {"r": 0}, Frontier())


def test_one_record_per_session_in_arrival_order() -> None:
    a = _append(draft(0, session_id="s"))
    b = _append(draft(1, session_id="t"))
    c = _append(draft(2, session_id="s", run_id="r", tape=True))
    plan = plan_commit([a, b, c], _heads())
    # s's events gather into its record (positions 1, 2), then t's (3).
    assert [v.session_id for v in plan.views] == ["s", "s", "t"]
    assert [v.position for v in plan.views] == [1, 2, 3]
    assert plan.answers == [[plan.views[0]], [plan.views[2]], [plan.views[1]]]
    assert plan.records == 2 and plan.next_position == 4
    assert [v.tape_seq for v in plan.views] == [-1, 0, -1] and plan.tape_next == {"r": 1}
    assert plan.claims == [(v.event_id.encode(), u64_key(v.position)) for v in plan.views]


def test_the_writes_are_the_documented_record_and_indexes_in_frame_order() -> None:
    a = _append(draft(0, session_id="s", run_id="r", tape=True,
                      entity_writes=(EntityWrite("runs", "r", b"v"),)))  # fmt: skip
    prev = bytes(range(32))
    plan = plan_commit([a], Heads(8, GENESIS, {"s": prev}, {"r": 5}, Frontier()))
    [event] = a.events
    body = record_body([record_row(event, 5, event.redactions, event.payload)])
    digest = record_hash(record_head(prev, 8, 1, "s"), body)
    assert [(name, key) for name, key, _v in plan.ops] == [
        (EVENT_IDS, event.event_id.encode()),
        (EVENTS, u64_key(8)),
        (BY_SESSION, scoped_key("s", 8)),
        (TAPE, scoped_key("r", 5)),
        (TLOG, node_key(tree_prefix(JOURNAL_TREE), 0, 0)),
        ("runs", b"r"),
    ]
    stored = decode_record(plan.ops[1][2])  # type: ignore[arg-type]
    assert stored.hash == digest == plan.sessions["s"]
    assert plan.views[0].prev_hash == prev.hex() and plan.views[0].tape_seq == 5
    assert plan.rows == {("runs", "r"): b"v"}


def test_a_batch_writes_table_after_table_in_frame_order() -> None:
    # Many writes a table (a batch; built a table at a time, unlike a lone append's):
    # the same layout, each table's writes in position order, with their values.
    requests = [_append(draft(i, session_id="s" if i % 2 else "t", run_id="r", tape=True))
                for i in range(4)]  # fmt: skip
    plan = plan_commit(requests, _heads())
    ids = [v.event_id.encode() for v in plan.views]
    prefix = tree_prefix(JOURNAL_TREE)
    assert [(name, key) for name, key, _v in plan.ops] == [
        *[(EVENT_IDS, event_id) for event_id in ids],
        (EVENTS, u64_key(2)), (EVENTS, u64_key(4)),  # t's record (0, 2), then s's (1, 3)
        (BY_SESSION, scoped_key("t", 2)), (BY_SESSION, scoped_key("s", 4)),
        (TAPE, scoped_key("r", 1)), (TAPE, scoped_key("r", 3)),  # each record's last seq of r
        (TLOG, node_key(prefix, 0, 0)), (TLOG, node_key(prefix, 0, 1)),
    ]  # fmt: skip
    assert [value for name, _k, value in plan.ops if name == EVENT_IDS] == [
        u64_key(position) for position in range(1, 5)]
    assert [value for name, _k, value in plan.ops if name == TAPE] == [u64_key(2), u64_key(4)]
    # Each view's weight in a follower's buffer: its payload plus the rest's allowance.
    payloads = {e.event_id: e.payload for r in requests for e in r.events}
    assert plan.sizes == [len(payloads[v.event_id]) + EVENT_OVERHEAD for v in plan.views]
    assert plan.ops == [(name, key, value) for name, items in plan.tables.items()
                        for key, value in items]  # fmt: skip


def test_the_rows_hold_the_value_of_the_last_write_in_queued_order() -> None:
    # The entity cache files these values as the rows' contents after the commit.
    writes = [(EntityWrite("runs", "r", b"1"), EntityWrite("runs", "q", b"2")),
              (EntityWrite("runs", "r", b"3"),), (EntityWrite("runs", "q", None),)]
    batch = [_append(draft(i, session_id=f"s{i % 2}", entity_writes=w))
             for i, w in enumerate(writes)]
    heads = Heads(1, GENESIS, {"s0": GENESIS, "s1": GENESIS}, {}, Frontier())
    plan = plan_commit(batch, heads)
    assert plan.rows == {("runs", "r"): b"3", ("runs", "q"): None}
    # The same outcome as applying the frame's entity ops in order.
    applied: dict[tuple[str, str], bytes | None] = {}
    for table, key, value in plan.ops:
        if table == "runs":
            applied[(table, key.decode())] = value
    assert applied == plan.rows


def test_entity_puts_are_grouped_by_table_in_queued_order() -> None:
    # Puts only: the frame's writes by table too (applied a table at a time), each
    # table's rows in the order they were queued, so the last put of a row wins.
    writes = [(EntityWrite("runs", "r", b"1"), EntityWrite("tasks", "t", b"2")),
              (EntityWrite("runs", "r", b"3"),)]
    batch = [_append(draft(i, session_id="s", entity_writes=w)) for i, w in enumerate(writes)]
    plan = plan_commit(batch, _heads())
    assert plan.tables["runs"] == [(b"r", b"1"), (b"r", b"3")]
    assert plan.tables["tasks"] == [(b"t", b"2")]
    grouped = sorted((name, key, value) for name, items in plan.tables.items()
                     for key, value in items)
    assert grouped == sorted(plan.ops)  # the same writes as the frame, none twice


def test_an_entity_delete_keeps_the_frame_order_alone() -> None:
    batch = [_append(draft(0, session_id="s", entity_writes=(EntityWrite("runs", "r", b"1"),))),
             _append(draft(1, session_id="s", entity_writes=(EntityWrite("runs", "r", None),)))]
    plan = plan_commit(batch, _heads())
    assert plan.tables == {}
    assert [(n, k, v) for n, k, v in plan.ops if n == "runs"] == [
        ("runs", b"r", b"1"), ("runs", b"r", None)]


def test_planning_is_pure() -> None:
    requests = [_append(draft(i, session_id="s" if i % 2 else "t")) for i in range(6)]
    heads = _heads()
    first, second = plan_commit(requests, heads), plan_commit(requests, heads)
    assert first.ops == second.ops and first.views == second.views
    assert heads == _heads()  # the heads given are not touched


def test_a_request_spanning_sessions_keeps_its_order_and_positions() -> None:
    spanning = _append(draft(0, session_id="s"), draft(1, session_id="t"), draft(2, session_id="s"))
    chunks = layout([spanning])
    assert [[e.session_id for _r, e in chunk] for chunk in chunks] == [["s"], ["t"], ["s"]]
    plan = plan_commit([spanning], _heads())
    assert [v.position for v in plan.answers[0]] == [1, 2, 3]
    assert plan.views[2].prev_hash == plan.views[0].hash  # s's chain skips t's record


def test_a_record_is_cut_at_the_event_bound() -> None:
    big = _append(*[draft(i, session_id="s") for i in range(MAX_RECORD_EVENTS + 1)])
    plan = plan_commit([big], _heads())
    assert plan.records == 2 and plan.views[-1].prev_hash == plan.views[0].hash


def test_a_head_the_writer_did_not_resolve_is_an_error() -> None:
    with pytest.raises(KeyError):
        plan_commit([_append(draft(0, session_id="unknown"))], _heads())


def test_the_tree_grows_by_one_entry_per_record_from_the_frontier() -> None:
    # Three earlier records: the frontier of a tree of 3 entries.
    earlier = [bytes([i]) * 32 for i in range(3)]
    frontier, _rows = extend(Frontier(), [(e, i + 1) for i, e in enumerate(earlier)],
                             tree_prefix(JOURNAL_TREE))  # fmt: skip
    requests = [_append(draft(i, session_id="s" if i % 2 else "t")) for i in range(4)]
    heads = Heads(4, GENESIS, {"s": GENESIS, "t": GENESIS}, {}, frontier)
    plan = plan_commit(requests, heads)
    record_hashes = [decode_record(v).hash for name, _k, v in plan.ops if name == EVENTS]  # type: ignore[arg-type]
    assert len(record_hashes) == plan.records == 2
    # The plan's tree is the tree of every record so far, entry i = record i's hash.
    whole = MemoryTree([leaf_hash(e) for e in [*earlier, *record_hashes]])
    assert plan.tree.size == 5 and plan.tree.root() == root_at(5, whole.hash_at)
    level0 = [(k, v) for name, k, v in plan.ops if name == TLOG]
    prefix = tree_prefix(JOURNAL_TREE)
    lasts = [decode_record(v).last for name, _k, v in plan.ops if name == EVENTS]  # type: ignore[arg-type]
    assert level0 == [(node_key(prefix, 0, 3 + i), h + u64_key(last))
                      for i, (h, last) in enumerate(zip(record_hashes, lasts, strict=True))]  # fmt: skip


def test_each_request_of_a_batch_is_answered_with_its_own_events_in_its_order() -> None:
    # A request spanning sessions, one gathered into a session's record, one alone.
    spanning = _append(draft(0, session_id="s"), draft(1, session_id="t"), draft(2, session_id="s"))
    gathered = _append(draft(3, session_id="t"), draft(4, session_id="t"))
    single = _append(draft(5, session_id="s"))
    requests = [spanning, gathered, single]
    plan = plan_commit(requests, _heads())
    for request, answer in zip(requests, plan.answers, strict=True):
        assert [v.event_id for v in answer] == [e.event_id for e in request.events]
        positions = [v.position for v in answer]
        assert positions == list(range(positions[0], positions[0] + len(positions)))
    assert sorted(v.position for answer in plan.answers for v in answer) == [
        v.position for v in plan.views
    ]
