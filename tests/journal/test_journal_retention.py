"""Retention: pruned spans leave hash tombstones; verify passes; cursors into them are truncated."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import msgspec
import pytest

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal import (
    PRUNED_KIND,
    RETENTION_SESSION,
    EventDraft,
    JournalConfig,
    JournalStore,
    PruneOrder,
    PruneResult,
    StoredEvent,
    export_bundle,
    prune_older_than,
    retention_every,
    verify_bundle,
    verify_store,
)
from palyra.journal.format.record import decode_record, encode_tombstone, is_tombstone
from palyra.journal.format.signing import Signer
from palyra.testing.archives import extract_tar

from .helpers import raw_record


def _holding(data_dir: Path, position: int) -> tuple[int, bytes]:
    """The key (last position) and raw bytes of the record holding ``position``."""
    with JournalStore.open(data_dir, config=JournalConfig(readonly=True)) as store, \
            store.env.read() as txn:
        cursor = txn.cursor(db=store.env.dbs["_events"])
        assert cursor.set_range(position.to_bytes(8, "big"))
        return int.from_bytes(cursor.key(), "big"), bytes(cursor.value())

OLD = 1_000_000  # ts_ms of "old" events: 1970, older than any max age
NOW = 10**13


def _ev(i: int, session: str, run: str = "", *, tape: bool = False, ts: int = OLD) -> EventDraft:
    return EventDraft(kind="test.event", actor="tester", session_id=session, run_id=run,
                      tape=tape, payload={"i": i, "pad": "x" * 200}, ts_ms=ts)


async def _fill(store: JournalStore) -> None:
    """Runs r0 (s0) and r1 (s1) interleaved, some run-less events; then one young event."""
    for i in range(12):
        run = f"r{i % 2}"
        await store.append([_ev(i, f"s{i % 2}", run, tape=True),
                            _ev(100 + i, f"s{i % 2}", run, tape=True)])
        if i % 4 == 0:
            await store.append([_ev(200 + i, "s2")])
    await store.append([_ev(999, "s0", "r9", tape=True, ts=NOW)])


def _code(exc: pytest.ExceptionInfo[PalyraError]) -> ErrorCode:
    return exc.value.code


async def test_prune_then_verify_store_and_bundles(store: JournalStore, tmp_path: Path) -> None:
    await _fill(store)
    head = store.head().count
    before = {e.position: e for e in store.read_range(0, 1000)}
    result = await prune_older_than(store, 0, now_ms=NOW, batch_records=3)
    # Everything old goes; the young last record stays; the claim is appended.
    assert result.first == 1 and result.through == head - 1 and result.events == head - 1
    assert result.records >= 3 and result.bytes_freed > 0
    assert store.pruned_through() == head - 1
    report = verify_store(store)
    assert report.ok, report.summary()
    assert report.pruned == head - 1 and f"pruned={head - 1}" in report.summary()
    # The prune is itself on the chain (one journal.pruned event per batch).
    rest = store.read_range(head - 1, 1000)
    assert rest[0] == before[head]
    claims = [e for e in rest if e.kind == PRUNED_KIND]
    assert claims and all(e.session_id == RETENTION_SESSION for e in claims)
    assert claims[-1].payload["through"] == head - 1
    assert claims[-1].payload["head_hash"] == before[head - 1].global_hash
    assert sum(int(c.payload["events"]) for c in claims) == head - 1
    for session in (None, "s0", "s2"):
        out = tmp_path / f"bundle-{session}.ndjson"
        export_bundle(store, out, session_id=session)
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        assert lines[0]["version"] == 5
        assert any(line["type"] == "pruned" for line in lines)
        checked = verify_bundle(out)
        assert checked.ok, checked.summary()
        assert checked.pruned > 0


async def test_cursors_into_pruned_data_are_truncated(store: JournalStore) -> None:
    await _fill(store)
    head = store.head().count
    tape_before = store.read_tape("r1", -1, 1000).events
    result = await prune_older_than(store, 0, now_ms=NOW, through=10)
    through = result.through
    assert 0 < through <= 10
    for cursor in (0, 1, through - 1):
        with pytest.raises(PalyraError) as exc:
            store.read_range(cursor, 10)
        assert _code(exc) is ErrorCode.CURSOR_TRUNCATED
        assert f"earliest readable cursor is {through}" in exc.value.message
        assert exc.value.details["earliest_cursor"] == str(through)
    # The boundary reads the first unpruned event: no gap.
    assert store.read_range(through, 1)[0].position == through + 1
    with pytest.raises(PalyraError) as exc:
        store.read_session("s1", 0, 10)
    assert _code(exc) is ErrorCode.CURSOR_TRUNCATED
    assert store.read_session("s1", through, 1)[0].position > through
    # Tape: the seqs of pruned records are truncated, the first kept one reads on.
    pruned = [e.tape_seq for e in tape_before if e.position <= through]
    kept = [e for e in tape_before if e.position > through]
    assert pruned and kept
    for after in (-1, pruned[-1] - 1):
        with pytest.raises(PalyraError) as exc:
            store.read_tape("r1", after, 10)
        assert _code(exc) is ErrorCode.CURSOR_TRUNCATED
        assert exc.value.details["earliest_cursor"] == str(pruned[-1])
    assert store.read_tape("r1", pruned[-1], 1000).events == kept
    # The daemon's own readers of old tapes read what is kept.
    assert store.read_tape_kept("r1", -1, 1000).events == kept
    assert store.read_tape("r1", 1000, 10).events == []
    # Followers raise on their first read; never a silent skip.
    with pytest.raises(PalyraError) as exc:
        async for _ in store.follow(0):
            pass
    assert _code(exc) is ErrorCode.CURSOR_TRUNCATED
    with pytest.raises(PalyraError) as exc:
        async for _ in store.follow_tape("r1", -1):
            pass
    assert _code(exc) is ErrorCode.CURSOR_TRUNCATED
    batches = store.follow_tape_batches("r1", pruned[-1])
    assert (await anext(batches))[0] == kept[0]
    await batches.aclose()
    assert store.head().count > head  # the claim was appended


async def test_live_runs_and_young_records_stop_the_prefix(store: JournalStore) -> None:
    await _fill(store)
    first_r1 = store.read_tape("r1", -1, 1).events[0].position
    result = await prune_older_than(store, 0, now_ms=NOW, live_runs=lambda: frozenset({"r1"}))
    assert result.through == first_r1 - 1
    assert [e.tape_seq for e in store.read_tape("r1", -1, 1000).events] == list(range(12))
    assert verify_store(store).ok
    # A young record stops it too: nothing older behind it is pruned.
    async with JournalStore.open(store.data_dir.parent / "other") as other:
        await other.append([_ev(1, "s")])
        await other.append([_ev(2, "s", ts=NOW)])
        await other.append([_ev(3, "s")])
        await other.append([_ev(4, "s")])
        assert (await prune_older_than(other, 1000, now_ms=NOW)).records == 1
        assert other.pruned_through() == 1


async def test_nothing_to_prune_writes_nothing(store: JournalStore) -> None:
    assert (await prune_older_than(store, 0, now_ms=NOW)).records == 0
    await store.append([_ev(1, "s")])
    result = await prune_older_than(store, 0, now_ms=NOW)  # the newest record always stays
    assert result.records == 0 and store.head().count == 1


async def test_appends_continue_after_prune(store: JournalStore) -> None:
    await _fill(store)
    await prune_older_than(store, 0, now_ms=NOW)
    # Sessions whose chain heads are tombstones go on; a pruned run's tape seqs continue.
    added = await store.append([_ev(1, "s0"), _ev(2, "s1", "r1", tape=True)])
    assert added[1].tape_seq == 12
    assert verify_store(store).ok
    # The young event at the old head stops the prefix: nothing more goes.
    assert (await prune_older_than(store, 0, now_ms=NOW)).records == 0
    report = verify_store(store)
    assert report.ok and report.pruned == store.pruned_through()


async def test_event_ids_stay_taken_after_prune(store: JournalStore) -> None:
    [first] = await store.append([_ev(1, "s")])
    await store.append([_ev(2, "s", ts=NOW)])
    await prune_older_than(store, 0, now_ms=NOW)
    assert store.pruned_through() == 1
    with pytest.raises(PalyraError) as exc:
        await store.append([EventDraft("k", "a", event_id=first.event_id)])
    assert exc.value.code is ErrorCode.ALREADY_EXISTS


async def test_signed_checkpoints_still_verify(data_dir: Path) -> None:
    async with JournalStore.open(data_dir) as store:
        await store.append([_ev(0, "s9")])
        made = await store.checkpoint()  # signs a head that is then pruned
        await _fill(store)
        await prune_older_than(store, 0, now_ms=NOW)
        await store.checkpoint()
    key = Signer.load_or_create(data_dir / "journal").public_key
    report = verify_store(data_dir, trusted_keys=[key])
    assert report.ok, report.summary()
    assert report.checkpoints == 2 and made.position == 1 and report.pruned > 1
    # Sealed bundles (full and one session's, with its pruned records) verify with the key.
    for session in (None, "s1"):
        out = data_dir.parent / f"sealed-{session}.ndjson"
        export_bundle(data_dir, out, session_id=session)
        checked = verify_bundle(out, trusted_keys=[key])
        assert checked.ok and checked.sealed and checked.pruned > 0, checked.summary()


async def test_tampered_tombstones_are_reported(data_dir: Path) -> None:
    async with JournalStore.open(data_dir) as store:
        await _fill(store)
        await prune_older_than(store, 0, now_ms=NOW, through=9)
        through = store.pruned_through()
        kept = store.read_range(through, 1)[0].position
    tomb = raw_record(data_dir, through)
    assert is_tombstone(tomb)
    record = decode_record(tomb)
    # 1. a tombstone's record hash changed: the global link no longer matches.
    raw_record(data_dir, through, tomb[:1] + bytes(32) + tomb[33:])
    report = verify_store(data_dir)
    assert not report.ok and report.problem is not None
    assert report.problem.position == record.first
    raw_record(data_dir, through, tomb)
    # 2. its prev_hash changed: the session chain breaks.
    raw_record(data_dir, through, tomb[:65] + bytes(32) + tomb[97:])
    report = verify_store(data_dir)
    assert report.problem is not None and report.problem.position == record.first
    assert f"record under key {through} (pruned, positions {record.first}..{through}): prev_hash is {bytes(32).hex()}" in (
        report.problem.reason)
    raw_record(data_dir, through, tomb)
    assert verify_store(data_dir).ok
    # 3. the next record hidden as a tombstone (hashes kept): the claim no longer matches.
    _key, nxt = _holding(data_dir, kept)
    next_record = decode_record(nxt)
    raw_record(data_dir, next_record.last, encode_tombstone(next_record, 0))
    report = verify_store(data_dir)
    assert report.problem is not None and ": journal.pruned at position " in report.problem.reason
    assert f"expected through={next_record.last}" in report.problem.reason
    raw_record(data_dir, next_record.last, nxt)
    # 4. a record after unpruned data hidden as a tombstone: not a prefix.
    async with JournalStore.open(data_dir) as store:
        later = store.read_range(kept + 3, 1)[0].position
    later_record = decode_record(_holding(data_dir, later)[1])
    raw_record(data_dir, later_record.last, encode_tombstone(later_record, 0))
    report = verify_store(data_dir)
    assert report.problem is not None and report.problem.position == later_record.first
    assert report.problem.reason.startswith(
        f"record under key {later_record.last} (pruned, positions {later_record.first}.."
        f"{later_record.last}): a pruned record after ")


async def test_tampered_pruned_bundle_line(store: JournalStore, tmp_path: Path) -> None:
    await _fill(store)
    await prune_older_than(store, 0, now_ms=NOW, through=9)
    out = tmp_path / "b.ndjson"
    export_bundle(store, out)
    lines = out.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if '"type":"pruned"' in line)
    line = json.loads(lines[at])
    line["hash"] = "0" * 64
    lines[at] = msgspec.json.encode(line, order="sorted").decode()
    out.write_text("\n".join(lines) + "\n")
    report = verify_bundle(out)
    assert report.problem is not None and report.problem.position == line["position"]


async def test_prune_resumes_after_reopen(data_dir: Path) -> None:
    """A prune interrupted between batches leaves a verifying journal that prunes on."""
    async with JournalStore.open(data_dir) as store:
        await _fill(store)
        head = store.head().count
        await store.prune_batch(PruneOrder(before_ms=NOW, through=head, max_records=2))
    assert verify_store(data_dir).ok
    async with JournalStore.open(data_dir) as store:
        result = await prune_older_than(store, 0, now_ms=NOW, through=head)
        assert result.through == head - 1
    assert verify_store(data_dir).ok


FIXTURES = Path(__file__).parents[1] / "fixtures" / "journal_v1"


async def test_format1_journal_prunes(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    extract_tar(FIXTURES / "journal-v1.tar.gz", data_dir)
    async with JournalStore.open(data_dir) as store:
        before = store.read_range(0, 100)
        tape = store.read_tape("r1", -1, 100).events
        result = await prune_older_than(store, 0, now_ms=NOW, through=12)
        assert result.through == 12 and result.records == 12
        assert store.read_range(12, 100)[:12] == before[12:]
        with pytest.raises(PalyraError) as exc:
            store.read_tape("r1", -1, 100)
        assert exc.value.code is ErrorCode.CURSOR_TRUNCATED
        cut = int(exc.value.details["earliest_cursor"])
        assert store.read_tape("r1", cut, 100).events == [e for e in tape if e.tape_seq > cut]
        await store.append([_ev(1, "s1", "r1", tape=True)])
        await store.checkpoint()
    assert is_tombstone(raw_record(data_dir, 5))
    key = Signer.load_or_create(data_dir / "journal").public_key
    report = verify_store(data_dir, trusted_keys=[key])
    assert report.ok and report.pruned == 12, report.summary()
    out = tmp_path / "b.ndjson"
    export_bundle(data_dir, out)
    assert verify_bundle(out, trusted_keys=[key]).ok
    shutil.rmtree(data_dir)


def _same(a: list[StoredEvent], b: list[StoredEvent]) -> bool:
    return msgspec.json.encode(a) == msgspec.json.encode(b)


def test_readonly_store_reads_truncation(data_dir: Path) -> None:
    async def build() -> None:
        async with JournalStore.open(data_dir) as store:
            await _fill(store)
            await prune_older_than(store, 0, now_ms=NOW, through=5)

    asyncio.run(build())
    with JournalStore.open(data_dir, config=JournalConfig(readonly=True)) as ro:
        assert ro.pruned_through() == 5
        with pytest.raises(PalyraError):
            ro.read_range(0)
        assert _same(ro.read_range(5, 1), ro.read_range(5, 1))


async def test_retention_every_prunes_and_ends_when_the_store_closes(data_dir: Path) -> None:
    store = JournalStore.open(data_dir)
    await store.append([_ev(1, "s")])
    await store.append([_ev(2, "s")])
    seen: list[PruneResult] = []
    errors: list[PalyraError] = []
    task = asyncio.create_task(retention_every(store, 1000, 0.01, on_pruned=seen.append,
                                               on_error=errors.append))
    for _ in range(500):
        if seen:
            break
        await asyncio.sleep(0.01)
    assert [r.records for r in seen] == [1] and not errors
    store.close()
    await asyncio.wait_for(task, 10)  # ends on its own once the store is closed
    assert verify_store(data_dir).pruned == 1


async def test_retention_every_runs_its_follow_up_after_each_pass(data_dir: Path) -> None:
    """``then`` (the daemon's attachment collection) runs after every pass, and its
    error goes to ``on_error`` without stopping the loop."""
    store = JournalStore.open(data_dir)
    await store.append([_ev(1, "s")])
    await store.append([_ev(2, "s")])
    passes: list[int] = []
    errors: list[PalyraError] = []

    async def then() -> None:
        passes.append(store.pruned_through())
        if len(passes) == 1:
            raise PalyraError("collection failed", code=ErrorCode.UNAVAILABLE)

    task = asyncio.create_task(retention_every(store, 1000, 0.01, on_error=errors.append,
                                               then=then))
    for _ in range(500):
        if len(passes) >= 2:
            break
        await asyncio.sleep(0.01)
    assert passes[0] >= 1  # after the prune of that pass
    assert [e.message for e in errors] == ["collection failed"]
    store.close()
    await asyncio.wait_for(task, 10)
