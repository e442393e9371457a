"""Memory: hybrid retrieval, provenance checked against the journal, visibility, sensitive
deletes, and an index rebuilt from the journal after a restart. Real LMDB, the real
wordllama model from its wheel (offline), and the app facade."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from palyra_gen.palyra import v1 as pb

from palyra.adapters import GatePolicy
from palyra.agents.registry import AgentRegistry
from palyra.app import CallContext
from palyra.core.errors import ErrorCode, PalyraError
from palyra.engine import Selectors
from palyra.engine.sessions.reader import SessionReader
from palyra.engine.sessions.writer import SessionWriter
from palyra.journal import JournalConfig, JournalStore
from palyra.memory.embed import HashEmbedder, WordLlamaEmbedder
from palyra.memory.index import MemoryIndex
from palyra.memory.service import Memory
from palyra.policy import PolicyConfig, PolicyGate
from palyra.tools import default_registry

DAY = 86_400_000
T0 = 1_700_000_000_000
FACTS = ["my cat is called Miso", "the office is in Brno", "I take my coffee black",
         "the deploy key rotates every Monday", "our staging server runs Debian 12"]


def _index(embedder: object | None = None) -> MemoryIndex:
    index = MemoryIndex(embedder or WordLlamaEmbedder())  # type: ignore[arg-type]
    for i, text in enumerate(FACTS):
        index.add(f"m{i}", text, T0)
    return index


def test_lexical_and_vector_both_find_the_item() -> None:
    index = _index()
    assert index.search("Brno", T0)[0].memory_id == "m1"  # exact word
    assert index.search("what is the name of my pet", T0)[0].memory_id == "m0"  # meaning
    top = index.search("office in Brno", T0)[0]
    assert top.memory_id == "m1" and top.lexical == 1.0 and top.vector == 1.0
    assert top.score_bps == 5500 + 3500 + 1000  # normalised to the best candidate, age 0


def test_recency_breaks_ties_and_removed_items_are_gone() -> None:
    index = MemoryIndex(HashEmbedder())
    index.add("old", "release notes", T0 - 30 * DAY)
    index.add("new", "release notes", T0)
    hits = index.search("release notes", T0)
    assert [h.memory_id for h in hits] == ["new", "old"]
    assert hits[1].recency == pytest.approx(1 / 31)
    index.remove("new")
    assert [h.memory_id for h in index.search("release notes", T0)] == ["old"]
    assert index.search("release", T0, allowed=lambda m: m != "old") == []


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[JournalStore]:
    opened = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False))
    yield opened
    opened.close()


async def test_ingest_provenance_search_and_restart(tmp_path: Path) -> None:
    store = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False))
    memory = Memory(store)
    items = [await memory.ingest("user:alice", text) for text in FACTS]
    other = await memory.ingest("user:bob", "bob's cat is called Rex")
    # Provenance: the ingest event is in the journal and the digest is the text's.
    item = memory.get(items[0].memory_id)
    [event] = [e for e in store.read_range(0, 100) if e.event_id == item.provenance.event_id]
    assert event.kind == "memory.ingested" and event.payload["memory_id"] == item.memory_id
    assert item.provenance.sha256 == hashlib.sha256(event.payload["text"].encode()).hexdigest()
    alice = memory.visible("user:alice", "")
    hits = memory.search("what's my pet's name", alice)
    assert hits[0][0].memory_id == items[0].memory_id
    assert all(i.owner == "user:alice" for i, _ in hits)  # never bob's
    assert other.memory_id in {i.memory_id for i, _ in memory.search(
        "cat", memory.visible("admin:ops", "", everyone=True))}
    store.close()
    store = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False))
    again = Memory(store)  # the index is rebuilt from the journal
    assert again.search("Brno", again.visible("user:alice", ""))[0][0].memory_id == items[1].memory_id
    store.close()


async def test_the_app_scopes_reads_and_keeps_deletes_for_operators(store: JournalStore) -> None:
    from palyra.app._memory import MemoryApi

    class App(MemoryApi):
        """The memory RPCs over a real store, real sessions and the real Cedar gate."""

        def __init__(self, store: JournalStore) -> None:
            self.store = store
            self.engine = SimpleNamespace(policy=GatePolicy(PolicyGate.load(PolicyConfig()),
                                                            default_registry()),
                                          session_reader=SessionReader(store))
            self._agent_registry = AgentRegistry(store)

    app = App(store)
    alice = CallContext.for_principal("user:alice", "01J00000000000000000000000")
    bob = CallContext.for_principal("user:bob", "01J00000000000000000000000")
    ops = CallContext.for_principal("admin:ops", "01J00000000000000000000000")
    sessions = SessionWriter(store, app.engine.session_reader, lambda: T0)
    s1, s2 = [(await sessions.resolve(alice.identity.record(), Selectors(session_key=k)))
              .record.session_id for k in ("k1", "k2")]
    made = await app.ingest_memory(alice, pb.IngestMemoryRequest(item=pb.MemoryItem(
        text="the office is in Brno", tags=["work"], session_id=s1)))
    assert made.item is not None and made.item.scope == "session"
    assert made.item.provenance is not None and made.item.provenance.source == "api"
    mid = made.item.memory_id
    got = await app.get_memory(alice, pb.GetMemoryRequest(memory_id=mid))
    assert got.item is not None and got.item.owner == "user:alice"
    with pytest.raises(PalyraError) as hidden:
        await app.get_memory(bob, pb.GetMemoryRequest(memory_id=mid))
    assert hidden.value.code is ErrorCode.NOT_FOUND
    in_session = await app.search_memory(alice, pb.SearchMemoryRequest(query="Brno",
                                                                       session_id=s1))
    assert [h.item.memory_id for h in in_session.hits if h.item] == [mid]
    elsewhere = await app.search_memory(alice, pb.SearchMemoryRequest(query="Brno",
                                                                      session_id=s2))
    assert elsewhere.hits == []
    with pytest.raises(PalyraError) as denied:
        await app.delete_memory(alice, pb.DeleteMemoryRequest(memory_id=mid))
    assert denied.value.code is ErrorCode.PERMISSION_DENIED
    assert (await app.delete_memory(ops, pb.DeleteMemoryRequest(memory_id=mid))).deleted
    assert (await app.list_memory(alice, pb.ListMemoryRequest(session_id=s1))).items == []
    await app.ingest_memory(alice, pb.IngestMemoryRequest(item=pb.MemoryItem(text="a")))
    await app.ingest_memory(bob, pb.IngestMemoryRequest(item=pb.MemoryItem(text="b")))
    assert (await app.purge_memory(ops, pb.PurgeMemoryRequest())).purged == 2
    kinds = [e.kind for e in store.read_range(0, 100)]
    assert kinds.count("memory.deleted") == 1 and kinds.count("memory.purged") == 1


async def test_items_written_by_learning_are_found(store: JournalStore) -> None:
    """Items other code journals (post-run reflection) reach the index on the next search."""
    from palyra.journal import EventDraft
    from palyra.memory import MemoryItem, Provenance, item_write

    memory = Memory(store, HashEmbedder())
    assert memory.search("miso", memory.visible("user:a", "")) == []
    item = MemoryItem(memory_id="mem1", kind="durable_fact", text="my cat is called Miso",
                      scope="principal", owner="user:a", created_ms=T0,
                      provenance=Provenance(session_id="s", run_id="r", tape_seqs=[2],
                                            positions=[5], sha256="0" * 64, source="learning:x"))
    await store.append([EventDraft(kind="learning.candidate", actor="system:learning",
                                   entity_writes=(item_write(item),))])
    [(found, _hit)] = memory.search("miso", memory.visible("user:a", ""))
    assert found.memory_id == "mem1"


async def test_agent_scoped_items_reach_only_that_agents_runs(store: JournalStore) -> None:
    memory = Memory(store, HashEmbedder())
    mine = await memory.ingest("user:alice", "ticket queue is triage-eu", agent_id="A1")
    assert mine.scope == "agent"
    assert memory.search("ticket queue", memory.visible("user:alice", "S", agent_id="A1"))
    assert memory.search("ticket queue", memory.visible("user:alice", "S", agent_id="A2")) == []
    assert memory.search("ticket queue", memory.visible("user:alice", "S")) == []
