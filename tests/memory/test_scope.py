"""Visibility as a row mask agrees with visibility as a predicate, and search through the
mask returns what search through the predicate returns (random items, callers, removals)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from palyra.journal import EventDraft, JournalConfig, JournalStore
from palyra.memory import MemoryItem, Provenance, item_write
from palyra.memory.embed import HashEmbedder
from palyra.memory.items import item_delete
from palyra.memory.scope import ScopeColumns, Visibility
from palyra.memory.service import Memory

NOW = 1_700_000_000_000
PROV = Provenance(session_id="", run_id="", tape_seqs=[], positions=[], sha256="0" * 64,
                  source="test")
OWNERS = ["user:a", "user:b", "admin:ops"]
SESSIONS = ["", "S1", "S2"]
AGENTS = ["", "A1", "A2"]
KINDS = ["note", "preference", "durable_fact"]
WORDS = ["cat", "office", "brno", "deploy", "key", "monday", "coffee", "server"]

items = st.builds(
    lambda i, owner, scope, session, agent, kind, expires, words: MemoryItem(
        memory_id=f"m{i:03d}", kind=kind, text=" ".join(words) or "empty", scope=scope,
        owner=owner, session_id=session, agent_id=agent, provenance=PROV,
        created_ms=NOW - i * 1000, expires_ms=expires),
    st.integers(0, 60), st.sampled_from(OWNERS),
    st.sampled_from(["principal", "session", "agent", "other"]), st.sampled_from(SESSIONS),
    st.sampled_from(AGENTS), st.sampled_from(KINDS),
    st.sampled_from([0, 0, NOW - 1, NOW, NOW + 1]),
    st.lists(st.sampled_from(WORDS), max_size=5))
rules = st.builds(
    Visibility, st.sampled_from([*OWNERS, "user:nobody"]), st.sampled_from([*SESSIONS, "S9"]),
    st.booleans(), st.sampled_from([*AGENTS, "A9"]), st.just(NOW),
    st.frozensets(st.sampled_from(KINDS), max_size=2))


@settings(max_examples=300, deadline=None)
@given(st.lists(items, min_size=1, max_size=40), st.lists(st.integers(0, 39), max_size=10),
       st.lists(rules, min_size=1, max_size=4))
def test_the_mask_is_the_predicate(rows: list[MemoryItem], cleared: list[int],
                                   callers: list[Visibility]) -> None:
    columns = ScopeColumns()
    held: dict[int, MemoryItem] = {}
    for row, item in enumerate(rows):
        columns.set(row, item)
        held[row] = item
    columns.set(0, rows[-1])  # a row rewritten
    held[0] = rows[-1]
    for row in cleared:
        columns.clear(row)
        held.pop(row, None)
    for rule in callers * 2:  # the second round comes from the mask cache
        mask = columns.mask(rule, len(rows))
        assert mask.tolist() == [row in held and rule(held[row]) for row in range(len(rows))]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[JournalStore]:
    opened = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False))
    yield opened
    opened.close()


async def test_search_through_the_mask_equals_search_through_the_predicate(
        store: JournalStore) -> None:
    memory = Memory(store, HashEmbedder(), now_ms=lambda: NOW)
    rng = random.Random(5)
    made = []
    for i in range(300):
        item = MemoryItem(
            memory_id=f"m{i:03d}", kind=rng.choice(KINDS),
            text=" ".join(rng.choices(WORDS, k=rng.randint(1, 5))), owner=rng.choice(OWNERS),
            scope=rng.choice(["principal", "session", "agent"]),
            session_id=rng.choice(SESSIONS), agent_id=rng.choice(AGENTS), provenance=PROV,
            created_ms=NOW - rng.randint(0, 10**9), expires_ms=rng.choice([0, 0, NOW - 1]))
        made.append(item)
    await store.append([EventDraft(kind="learning.candidate", actor="system:learning",
                                   entity_writes=tuple(item_write(i) for i in made))])
    await store.append([EventDraft(kind="memory.deleted", actor="admin:ops",
                                   entity_writes=tuple(item_delete(i.memory_id)
                                                       for i in made[::7]))])
    for owner in [*OWNERS, "user:nobody"]:
        for session in [*SESSIONS, "S9"]:
            for agent in AGENTS:
                for everyone in (False, True):
                    rule = memory.visible(owner, session, everyone=everyone, agent_id=agent)
                    for query in ("cat office", "deploy key monday", "server"):
                        by_mask = memory.search(query, rule.without_kinds(("preference",)),
                                                limit=8)
                        by_call = memory.search(query, lambda item, r=rule: r.without_kinds(
                            ("preference",))(item), limit=8)
                        assert by_mask == by_call
                        assert all(i.memory_id not in {m.memory_id for m in made[::7]}
                                   and i.kind != "preference" for i, _h in by_mask)


async def test_an_expiry_past_the_wires_int64_is_held_at_its_largest_value(
        store: JournalStore) -> None:
    """A TTL reaching past 2**63 - 1 ms (an expiry of "never" spelled as the largest
    number) must not overflow the int64 the item is written as (it was a 500)."""
    memory = Memory(store, HashEmbedder(), now_ms=lambda: NOW)
    item = await memory.ingest("user:a", "kept for ever", ttl_ms=2**63 - 1)
    assert item.expires_ms == 2**63 - 1
