"""Property: followers served from memory see every event once, in order, whatever the interleaving.

Random programs interleave commits (several runs, tape and non-tape events,
awaited or left running), followers started from random cursors (tape and
global), consumers that wait for the next event or stop pulling for a while,
and the hand-off of commits to followers, which the program may hold back and
release later (a commit is in the store long before its followers hear of it,
or a follower reads it from the store first). Follower buffers are small
enough to overflow. At the end each follower must have produced exactly the
events after its cursor, in cursor order: no gap, no duplicate.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palyra.journal import JournalConfig, JournalStore, StoredEvent

from .helpers import draft

RUNS = ("a", "b")

events = st.lists(st.tuples(st.sampled_from(RUNS), st.booleans()), min_size=1, max_size=5)
programs = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), events),
        st.tuples(st.just("commit_bg"), events),
        st.tuples(st.just("start"), st.sampled_from([*RUNS, None]), st.floats(0, 1)),
        st.tuples(st.just("pull"), st.integers(0, 7), st.integers(1, 6)),
        st.tuples(st.just("deliver"), st.integers(1, 3)),
        st.tuples(st.just("yield"), st.integers(1, 3)),
    ),
    min_size=1,
    max_size=40,
)


@dataclass
class _Model:
    """What has been committed: cursor -> event id, for every follower kind."""

    positions: dict[int, str] = field(default_factory=dict)
    tapes: dict[str, dict[int, str]] = field(default_factory=lambda: {r: {} for r in RUNS})

    def record(self, committed: list[StoredEvent]) -> None:
        for event in committed:
            self.positions[event.position] = event.event_id
            if event.tape_seq >= 0:
                self.tapes[event.run_id][event.tape_seq] = event.event_id

    def expected(self, key: str | None) -> dict[int, str]:
        return self.positions if key is None else self.tapes[key]


@dataclass
class _Follower:
    key: str | None
    after: int
    iterator: Any
    seen: list[StoredEvent] = field(default_factory=list)
    task: asyncio.Future[StoredEvent] | None = None  # the consumer's pending "next event"

    def cursor(self, event: StoredEvent) -> int:
        return event.position if self.key is None else event.tape_seq

    def done_upto(self) -> int:
        return self.cursor(self.seen[-1]) if self.seen else self.after

    async def pull(self, count: int) -> None:
        """Ask for up to ``count`` events; stop at the first that is not there yet."""
        for _ in range(count):
            if self.task is None:
                self.task = asyncio.ensure_future(self.iterator.__anext__())
            for _ in range(3):
                await asyncio.sleep(0)
            if not self.task.done():
                return  # the consumer keeps waiting, live
            self.seen.append(self.task.result())
            self.task = None

    async def drain(self, last: int) -> None:
        while self.done_upto() < last:
            if self.task is None:
                self.task = asyncio.ensure_future(self.iterator.__anext__())
            self.seen.append(await asyncio.wait_for(asyncio.shield(self.task), 5))
            self.task = None


async def _run(
    program: list[tuple[Any, ...]], buffer_events: int, hold: bool, data_dir: Path
) -> None:
    config = JournalConfig(sync=False, follow_buffer_events=buffer_events)
    model = _Model()
    followers: list[_Follower] = []
    background: list[asyncio.Future[list[StoredEvent]]] = []
    held: list[Any] = []
    async with JournalStore.open(data_dir, config=config) as store:
        hub = store._hub
        if hold:
            # Commits stay in the store; their hand-off waits for a "deliver" op.
            store._writer._on_commit = held.append  # type: ignore[union-attr]

        def release(count: int) -> None:
            for _ in range(min(count, len(held))):
                hub.publish(held.pop(0))

        for op in program:
            if op[0] in ("commit", "commit_bg"):
                task = asyncio.ensure_future(
                    store.append([draft(i, run_id=r, tape=t) for i, (r, t) in enumerate(op[1])])
                )
                task.add_done_callback(lambda t: model.record(t.result()))
                if op[0] == "commit":
                    await task
                else:
                    background.append(task)
            elif op[0] == "start":
                key, where = op[1], op[2]
                low = -1 if key is not None else 0
                after = low + round(where * len(model.expected(key)))
                source = store.follow(after) if key is None else store.follow_tape(key, after)
                followers.append(_Follower(key, after, source.__aiter__()))
            elif op[0] == "pull" and followers:
                await followers[op[1] % len(followers)].pull(op[2])
            elif op[0] == "deliver":
                release(op[1])
            elif op[0] == "yield":
                for _ in range(op[1]):
                    await asyncio.sleep(0)
        await asyncio.gather(*background)
        release(len(held))
        for follower in followers:
            await follower.drain(max(model.expected(follower.key), default=follower.after))
            got = [(follower.cursor(e), e.event_id) for e in follower.seen]
            want = sorted(
                (c, i) for c, i in model.expected(follower.key).items() if c > follower.after
            )
            assert got == want, (follower.key, follower.after)
            # Nothing beyond what was committed.
            if follower.task is None:
                follower.task = asyncio.ensure_future(follower.iterator.__anext__())
            await asyncio.sleep(0.01)
            assert not follower.task.done()
            follower.task.cancel()
            await asyncio.gather(follower.task, return_exceptions=True)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs, buffer_events=st.sampled_from([1, 2, 4, 512]), hold=st.booleans())
def test_followers_never_skip_repeat_or_reorder(
    program: list[tuple[Any, ...]], buffer_events: int, hold: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_run(program, buffer_events, hold, Path(tmp) / "data"))
