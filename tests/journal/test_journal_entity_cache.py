"""Entity reads through the cache never serve a row older than the last answered commit.

A model of every table is kept beside a real store; writes (puts and deletes,
several tables, several keys) interleave with reads, while a second thread
reads the same rows all the time so its cache fills race the writer's
commits. After every append returns, every row read equals the model.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palyra.journal import EntityWrite, JournalConfig, JournalStore

from .helpers import draft

_TABLES = ("sessions", "runs")
_KEYS = ("a", "b", "c")
_writes = st.lists(
    st.lists(st.tuples(st.sampled_from(_TABLES), st.sampled_from(_KEYS),
                       st.one_of(st.none(), st.binary(min_size=1, max_size=8))),
             min_size=1, max_size=3),
    min_size=1, max_size=20)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(commits=_writes)
def test_reads_after_each_commit_see_it(tmp_path_factory: pytest.TempPathFactory,
                                        commits: list[list[tuple[str, str, bytes | None]]]
                                        ) -> None:
    asyncio.run(_scenario(tmp_path_factory.mktemp("cache"), commits))


async def _scenario(tmp: Path, commits: list[list[tuple[str, str, bytes | None]]]) -> None:
    model: dict[tuple[str, str], bytes | None] = {}
    async with JournalStore.open(tmp / "data", config=JournalConfig(sync=False)) as store:
        stop = threading.Event()

        def hammer() -> None:  # fills the cache concurrently with the writer's commits
            while not stop.is_set():
                for table in _TABLES:
                    for key in _KEYS:
                        store.get_entity(table, key)

        reader = threading.Thread(target=hammer, daemon=True)
        reader.start()
        try:
            for i, writes in enumerate(commits):
                await store.append([draft(i).with_writes(
                    *(EntityWrite(t, k, v) for t, k, v in writes))])
                model.update({(t, k): v for t, k, v in writes})
                for table in _TABLES:
                    for key in _KEYS:
                        assert store.get_entity(table, key) == model.get((table, key)), (
                            i, table, key)
        finally:
            stop.set()
            reader.join()
