"""Format 2: one record per session per commit, while every API still speaks in events."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palyra.journal import (
    EntityWrite,
    EventDraft,
    JournalConfig,
    JournalStore,
    StoredEvent,
    export_bundle,
    verify_bundle,
    verify_store,
)
from palyra.journal.format.record import decode_record
from palyra.journal.write import plan as _plan
from palyra.journal.write.prepare import prepare
from palyra.journal.write.requests import Append

from .helpers import delete_records, draft, put_record, raw_record, rewrite_record


async def test_one_append_is_one_record(store: JournalStore) -> None:
    events = await store.append(
        [draft(i, session_id="s", run_id="r", tape=i % 2 == 0) for i in range(7)]
        + [draft(99, session_id="s", run_id="other", tape=True)]
    )
    stats = store.stats()
    assert (stats.records, stats.appended_events, stats.commits) == (1, 8, 1)
    assert [e.position for e in events] == list(range(1, 9))
    assert [e.tape_seq for e in events] == [0, -1, 1, -1, 2, -1, 3, 0]
    # Every event names the record that holds it.
    assert len({(e.hash, e.prev_hash, e.global_hash) for e in events}) == 1
    assert store.head().head_hash == events[-1].global_hash and store.head().count == 8
    assert store.last_tape_seq("r") == 3 and store.last_tape_seq("other") == 0
    later = await store.append([draft(100, session_id="s")])
    assert later[0].prev_hash == events[0].hash
    report = verify_store(store)
    assert report.ok and report.events == 9 and report.head_position == 9


async def test_a_call_spanning_sessions_gets_a_record_per_session_run(store: JournalStore) -> None:
    sessions = ["a", "a", "b", "a", "", ""]
    events = await store.append([draft(i, session_id=s) for i, s in enumerate(sessions)])
    assert [e.position for e in events] == list(range(1, 7))
    assert store.stats().records == 4
    hashes = [e.hash for e in events]
    assert hashes[0] == hashes[1] and hashes[4] == hashes[5] and len(set(hashes)) == 4
    assert events[3].prev_hash == events[0].hash  # a's second record links to its first
    assert verify_store(store).ok
    assert [e.position for e in store.read_session("a")] == [1, 2, 4]
    assert [e.position for e in store.read_session("", after_position=5)] == [6]


def _request(drafts: list[EventDraft]) -> Append:
    loop = asyncio.new_event_loop()
    try:
        return Append(loop, loop.create_future(), prepare(drafts, JournalConfig()))
    finally:
        loop.close()


def test_layout_groups_sessions_and_keeps_each_call_contiguous(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a1 = _request([draft(1, session_id="a"), draft(2, session_id="a")])
    b1 = _request([draft(3, session_id="b")])
    mixed = _request([draft(4, session_id="b"), draft(5, session_id="a"), draft(6, session_id="a")])
    a2 = _request([draft(7, session_id="a")])
    chunks = _plan.layout([a1, b1, mixed, a2])
    shape = [[(e.session_id, e.value["i"]) for _r, e in chunk] for chunk in chunks]
    assert shape == [
        [("a", 1), ("a", 2), ("a", 7)],  # a's calls share one record, in arrival order
        [("b", 3)],
        [("b", 4)],  # the mixed call keeps its order: one record per run of one session
        [("a", 5), ("a", 6)],
    ]
    monkeypatch.setattr(_plan, "MAX_RECORD_EVENTS", 2)
    big = _request([draft(i, session_id="c") for i in range(5)])
    assert [len(c) for c in _plan.layout([big])] == [2, 2, 1]


async def test_concurrent_calls_of_one_session_share_a_record(data_dir: Path) -> None:
    async with JournalStore.open(data_dir) as store:
        results = await asyncio.gather(
            *(store.append([draft(i, session_id=f"s{i % 2}", run_id="r", tape=True)])
              for i in range(200))
        )  # fmt: skip
        stats = store.stats()
        assert stats.appended_events == 200 and stats.records < 200
        seqs = sorted(e.tape_seq for r in results for e in r)
        assert seqs == list(range(200))
        for result in results:  # each caller gets its own event, wherever it landed
            assert len(result) == 1
        assert verify_store(store).ok


async def test_a_taken_event_id_fails_only_its_call(store: JournalStore) -> None:
    [taken] = await store.append([draft(0, session_id="s")])
    calls = [
        [draft(1, session_id="s"), draft(2, session_id="s")],
        [draft(3, session_id="s"), draft(4, session_id="s", event_id=taken.event_id)],
        [draft(5, session_id="s")],
    ]
    outcomes = await asyncio.gather(*(store.append(c) for c in calls), return_exceptions=True)
    assert isinstance(outcomes[1], Exception)
    committed = [e for o in outcomes if isinstance(o, list) for e in o]
    assert sorted(e.payload["i"] for e in committed) == [1, 2, 5]
    assert [e.position for e in store.read_range(1)] == [2, 3, 4]
    assert verify_store(store).ok


async def test_entity_writes_apply_in_arrival_order(store: JournalStore) -> None:
    calls = [
        [draft(i, session_id=f"s{i % 3}", entity_writes=(EntityWrite("meta", "k", b"%d" % i),))]
        for i in range(12)
    ]
    await asyncio.gather(*(store.append(c) for c in calls))
    assert store.get_entity("meta", "k") == b"11"


def _mixed_drafts() -> list[list[EventDraft]]:
    calls = []
    for i in range(15):
        calls.append(
            [
                draft(i * 10 + k, session_id=f"s{(i + k) % 3}", run_id=f"r{k % 2}", tape=k != 1)
                for k in range(1 + i % 4)
            ]
        )
    return calls


@pytest.fixture
async def filled(store: JournalStore) -> list[StoredEvent]:
    results = await asyncio.gather(*(store.append(c) for c in _mixed_drafts()))
    return sorted((e for r in results for e in r), key=lambda e: e.position)


async def test_every_reader_cursor_lands_inside_records(
    store: JournalStore, filled: list[StoredEvent]
) -> None:
    last = filled[-1].position
    for after in range(last + 1):
        for limit in (1, 2, 5, 100):
            want = [e for e in filled if e.position > after][:limit]
            assert store.read_range(after, limit) == want
            for session in ("s0", "s1"):
                mine = [e for e in filled if e.session_id == session and e.position > after]
                assert store.read_session(session, after, limit) == mine[:limit]
    for run in ("r0", "r1"):
        tape = [e for e in filled if e.run_id == run and e.tape_seq >= 0]
        assert [e.tape_seq for e in tape] == list(range(len(tape)))
        for after_seq in range(-1, len(tape)):
            for limit in (1, 3, 100):
                page = store.read_tape(run, after_seq, limit)
                want = [e for e in tape if e.tape_seq > after_seq]
                assert page.events == want[:limit]
                more = len(want) > limit
                assert page.next_after_seq == (want[limit - 1].tape_seq if more else None)


async def test_follow_from_a_cursor_inside_a_record(
    store: JournalStore, filled: list[StoredEvent]
) -> None:
    follower = store.follow_tape("r0", after_seq=2).__aiter__()
    got = [await asyncio.wait_for(follower.__anext__(), 5) for _ in range(3)]
    assert [e.tape_seq for e in got] == [3, 4, 5]
    await follower.aclose()


async def test_tampering_inside_a_record_names_its_first_position(
    data_dir: Path, store: JournalStore
) -> None:
    await store.append([draft(0, session_id="x")])
    await store.append([draft(i, session_id="s") for i in range(1, 6)])  # positions 2..6
    await store.append([draft(9, session_id="x")])
    store.close()
    rewrite_record(data_dir, 4, ts_ms=1)
    report = verify_store(data_dir)
    assert report.problem is not None and report.problem.position == 2
    assert report.problem.reason.startswith("record under key 6 (positions 2..6): hash is ")
    assert report.events == 1 and report.head_position == 1


async def test_deleting_or_moving_a_record_is_caught(data_dir: Path, store: JournalStore) -> None:
    for i in range(4):
        await store.append([draft(i * 3 + k, session_id="s") for k in range(3)])  # 3 per record
    store.close()
    original = raw_record(data_dir, 6)
    delete_records(data_dir, [6])
    report = verify_store(data_dir)
    assert report.problem is not None and report.problem.position == 4
    assert report.problem.reason.startswith(
        "record under key 9 (positions 7..9): position is 7, expected 4 (positions 4..6 are missing)")
    put_record(data_dir, 7, original)  # the record put back under another key
    report = verify_store(data_dir)
    assert report.problem is not None and report.problem.position == 4
    assert report.problem.reason.startswith(
        "record under key 7 (positions 4..6): first is 4 and count 3, so its last position is 6, expected 7")


async def test_a_truncated_record_is_caught(data_dir: Path, store: JournalStore) -> None:
    await store.append([draft(i, session_id="s") for i in range(3)])
    store.close()
    raw = bytearray(raw_record(data_dir, 3))
    record = decode_record(bytes(raw))
    assert (record.first, record.last) == (1, 3)
    raw_record(data_dir, 3, bytes(raw[:-5]))  # a truncated body
    report = verify_store(data_dir)
    assert report.problem is not None and report.problem.position == 1


async def test_session_bundle_of_multi_event_records(
    data_dir: Path, tmp_path: Path, store: JournalStore, filled: list[StoredEvent]
) -> None:
    await store.checkpoint()
    store.close()
    for session in (None, "s0", "s1", "s2"):
        out = tmp_path / f"{session}.ndjson"
        summary = export_bundle(data_dir, out, session_id=session)
        mine = [e for e in filled if session is None or e.session_id == session]
        assert summary.events == len(mine)
        assert summary.links == (0 if session is None else len(filled) - len(mine))
        report = verify_bundle(out)
        assert report.ok, (session, report.summary())
        assert report.events == len(mine) and report.checkpoints == 1


# --- property: whatever the calls, reads give back exactly the events written -------------

calls = st.lists(
    st.lists(
        st.tuples(st.sampled_from(["", "s1", "s2"]), st.sampled_from(["r1", "r2"]), st.booleans()),
        min_size=1,
        max_size=6,
    ),
    min_size=1,
    max_size=8,
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=calls, cut=st.sampled_from([1, 2, 1024]))
def test_records_round_trip_through_every_reader(
    batches: list[list[tuple[str, str, bool]]], cut: int
) -> None:
    async def run(data_dir: Path) -> None:
        async with JournalStore.open(data_dir, config=JournalConfig(sync=False)) as store:
            results = await asyncio.gather(
                *(
                    store.append([draft(i, session_id=s, run_id=r, tape=t) for i, (s, r, t) in
                                  enumerate(b)])
                    for b in batches
                )
            )  # fmt: skip
            written = sorted((e for r in results for e in r), key=lambda e: e.position)
            assert [e.position for e in written] == list(range(1, len(written) + 1))
            for batch, result in zip(batches, results, strict=True):
                positions = [e.position for e in result]
                assert positions == list(range(positions[0], positions[0] + len(batch)))
            assert store.read_range(0, 1000) == written
            for after in range(len(written) + 1):
                assert store.read_range(after, 3) == written[after : after + 3]
            for session in ("", "s1", "s2"):
                assert store.read_session(session, 0, 1000) == [
                    e for e in written if e.session_id == session
                ]
            for run_id in ("r1", "r2"):
                tape = [e for e in written if e.run_id == run_id and e.tape_seq >= 0]
                assert [e.tape_seq for e in tape] == list(range(len(tape)))
                for after in range(-1, len(tape)):
                    assert store.read_tape(run_id, after, 2).events == tape[after + 1 : after + 3]
            assert verify_store(store).ok
        export_bundle(data_dir, data_dir.parent / "b.ndjson", session_id="s1")
        assert verify_bundle(data_dir.parent / "b.ndjson").ok

    with tempfile.TemporaryDirectory() as tmp:
        original = _plan.MAX_RECORD_EVENTS
        _plan.MAX_RECORD_EVENTS = cut
        try:
            asyncio.run(run(Path(tmp) / "data"))
        finally:
            _plan.MAX_RECORD_EVENTS = original
