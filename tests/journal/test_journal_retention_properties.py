"""Property: random journals, random prune bounds and live runs.

After the prune, verify passes (store and full bundle), every readable event is
byte-identical to before, every cursor below the watermark is truncated (global,
session and tape cursors), every cursor at or past it reads on with no gap, and
no event of a live run or past the bound was pruned.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal import (
    EventDraft,
    JournalConfig,
    JournalStore,
    StoredEvent,
    export_bundle,
    prune_older_than,
    verify_bundle,
    verify_store,
)

NOW = 10**13
_call = st.tuples(
    st.integers(0, 3),  # session
    st.integers(0, 3),  # run (3: no run)
    st.integers(1, 4),  # events
    st.booleans(),  # young (ts = NOW)
)


def _raises_truncated(fn: object, *args: object) -> bool:
    try:
        fn(*args)  # type: ignore[operator]
    except PalyraError as exc:
        return exc.code is ErrorCode.CURSOR_TRUNCATED
    return False


def _enc(events: list[StoredEvent]) -> bytes:
    return msgspec.json.encode(events)


async def _scenario(root: Path, calls: list[tuple[int, int, int, bool]], through: int,
                    live: frozenset[str], batch: int) -> None:
    config = JournalConfig(sync=False)
    async with JournalStore.open(root / "data", config=config) as store:
        for n, (session, run, count, young) in enumerate(calls):
            await store.append([
                EventDraft("test.event", "tester", session_id=f"s{session}",
                           run_id=f"r{run}" if run < 3 else "", tape=run < 3,
                           payload={"n": n, "k": k}, ts_ms=NOW if young else 1000 + n)
                for k in range(count)])
        before = store.read_range(0, 1000)
        tapes = {f"r{r}": store.read_tape(f"r{r}", -1, 1000).events for r in range(3)}
        result = await prune_older_than(store, 0, now_ms=NOW, through=through,
                                        live_runs=lambda: live, batch_records=batch)
        w = store.pruned_through()
        assert w == (result.through if result.records else 0)
        assert w <= min(through, len(before) - 1) or w == 0
        for event in before[:w]:
            assert event.run_id not in live and event.ts_ms < NOW
        # The prefix stopped for a reason: the next record is live, young, past the
        # bound or the newest one.
        record = [e for e in before if e.global_hash == before[w].global_hash]
        assert any(e.run_id in live or e.ts_ms >= NOW or e.position > through
                   or e.position == len(before) for e in record)
        report = verify_store(store)
        assert report.ok, report.summary()
        assert report.pruned == w
        # Readable events are byte-identical; cursors below w are truncated.
        assert _enc(store.read_range(w, 1000)[: len(before) - w]) == _enc(before[w:])
        for cursor in range(w):
            assert _raises_truncated(store.read_range, cursor, 1)
        for session in range(4):
            own = [e for e in before if e.session_id == f"s{session}"]
            if any(e.position <= w for e in own):
                assert _raises_truncated(store.read_session, f"s{session}", 0, 1)
            assert _enc(store.read_session(f"s{session}", w, 1000)) == _enc(
                [e for e in own if e.position > w])
        for run_id, tape in tapes.items():
            gone = [e.tape_seq for e in tape if e.position <= w]
            kept = [e for e in tape if e.position > w]
            for after in range(-1, gone[-1] if gone else -1):
                assert _raises_truncated(store.read_tape, run_id, after, 1000)
            cut = gone[-1] if gone else -1
            assert _enc(store.read_tape(run_id, cut, 1000).events) == _enc(kept)
        out = root / "bundle.ndjson"
        export_bundle(store, out)
        checked = verify_bundle(out)
        assert checked.ok and checked.pruned == w, checked.summary()


@settings(max_examples=40, deadline=None)
@given(calls=st.lists(_call, min_size=1, max_size=14), through=st.integers(0, 40),
       live=st.frozensets(st.sampled_from(["r0", "r1", "r2"]), max_size=2),
       batch=st.integers(1, 4))
def test_prune_keeps_the_chain_and_truncates_cursors(
    calls: list[tuple[int, int, int, bool]], through: int, live: frozenset[str], batch: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_scenario(Path(tmp), calls, through, live, batch))
