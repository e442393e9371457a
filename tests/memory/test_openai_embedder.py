"""The OpenAI-compatible embedder against a real HTTP server on loopback, on its own, through
the Memory service (ingest, search, restart, a failing endpoint) and through config loading."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from palyra.config import load_config
from palyra.core.errors import ErrorCode, PalyraError
from palyra.journal import JournalConfig, JournalStore
from palyra.memory.config import OpenAIEmbeddingsConfig
from palyra.memory.embed import HashEmbedder
from palyra.memory.factory import build_embedder
from palyra.memory.remote import OpenAIEmbedder
from palyra.memory.service import Memory
from tests.memory.fake_embeddings import (
    DEFAULT_DIM,
    FakeEmbeddings,
    fake_vector,
    serve_fake_embeddings,
)

FACTS = ["my cat is called Miso", "the office is in Brno", "I take my coffee black",
         "the deploy key rotates every Monday", "our staging server runs Debian 12"]
FAST = 0.001  # backoff before a retry, s


@pytest.fixture
def fake() -> Iterator[tuple[str, FakeEmbeddings]]:
    with serve_fake_embeddings() as served:
        yield served


def _embedder(base_url: str, **fields: object) -> OpenAIEmbedder:
    config = OpenAIEmbeddingsConfig(  # type: ignore[arg-type]
        base_url=base_url, model="fake-embed", api_key_env="", timeout_s=5.0, max_retries=1,
        **fields)
    return OpenAIEmbedder(config, "sk-test", backoff_s=FAST)


def _unit(text: str, dim: int = DEFAULT_DIM) -> np.ndarray:
    v = np.asarray(fake_vector(text, dim), dtype=np.float32)
    return v / (np.linalg.norm(v) or 1.0)


async def test_batches_in_order_normalised_with_the_key(fake: tuple[str, FakeEmbeddings]) -> None:
    url, app = fake
    embedder = _embedder(url, batch_size=2)
    assert embedder.dim == 0  # learned from the first answer
    vectors = await embedder.aembed(FACTS)
    assert vectors.shape == (5, DEFAULT_DIM) and embedder.dim == DEFAULT_DIM
    for text, row in zip(FACTS, vectors, strict=True):  # the fake answers in reverse order
        assert np.allclose(row, _unit(text), atol=1e-6)
    assert [len(body["input"]) for _h, body in app.requests] == [2, 2, 1]
    assert all(h["authorization"] == "Bearer sk-test" and body["model"] == "fake-embed"
               and "dimensions" not in body for h, body in app.requests)
    assert np.allclose(embedder.embed(["the office is in Brno"])[0], _unit(FACTS[1]), atol=1e-6)
    await embedder.aclose()


async def test_configured_dimensions_are_sent_and_checked(fake: tuple[str, FakeEmbeddings]) -> None:
    url, app = fake
    embedder = _embedder(url, dimensions=16)
    assert (await embedder.aembed(["a b c"])).shape == (1, 16)
    assert app.requests[-1][1]["dimensions"] == 16
    app.dim_override = 20  # the endpoint changed its model under us: refused, never mixed
    with pytest.raises(PalyraError) as wrong:
        await embedder.aembed(["a b c"])
    assert wrong.value.code is ErrorCode.CONFIG_INVALID
    await embedder.aclose()


async def test_retries_then_the_breaker_fails_fast(fake: tuple[str, FakeEmbeddings]) -> None:
    url, app = fake
    now = [0.0]
    embedder = OpenAIEmbedder(
        OpenAIEmbeddingsConfig(base_url=url, model="m", api_key_env="", max_retries=1),
        clock=lambda: now[0], backoff_s=FAST)
    app.fail_next = 1  # one 500, then fine: retried within the call
    assert (await embedder.aembed(["x"])).shape == (1, DEFAULT_DIM)
    app.down = True
    for _ in range(3):  # three failed calls (two attempts each) open the breaker
        with pytest.raises(PalyraError) as down:
            await embedder.aembed(["x"])
        assert down.value.code is ErrorCode.PROVIDER_UNAVAILABLE
    seen = len(app.requests)
    with pytest.raises(PalyraError):
        await embedder.aembed(["x"])
    assert len(app.requests) == seen  # failed fast, the endpoint was not asked
    app.down = False
    now[0] += 60.0  # half-open: one trial call, which succeeds and closes it
    assert (await embedder.aembed(["x"])).shape == (1, DEFAULT_DIM)
    await embedder.aclose()


async def test_memory_end_to_end_through_the_endpoint(tmp_path: Path,
                                                      fake: tuple[str, FakeEmbeddings]) -> None:
    url, app = fake
    store = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False))
    memory = Memory(store, _embedder(url))
    items = [await memory.ingest("user:alice", text) for text in FACTS]
    assert memory.status().pending == 0
    assert memory.status().space == f"openai:fake-embed/{DEFAULT_DIM}"
    alice = memory.visible("user:alice", "")
    hits = await memory.asearch("where is the office", alice)
    assert hits[0][0].memory_id == items[1].memory_id and hits[0][1].vector == 1.0
    asked = len(app.requests)
    assert (await memory.asearch("where is the office", alice))[0][0] == items[1]
    assert len(app.requests) == asked  # the query vector is cached
    # The synchronous path (the SearchMemory RPC) asks the endpoint itself.
    assert memory.search("coffee black", alice)[0][0].memory_id == items[2].memory_id
    await memory.aclose()
    store.close()


async def test_a_failing_endpoint_loses_no_item_and_memory_catches_up(
        tmp_path: Path, fake: tuple[str, FakeEmbeddings]) -> None:
    url, app = fake
    now = [0.0]
    store = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=True))
    memory = Memory(store, OpenAIEmbedder(
        OpenAIEmbeddingsConfig(base_url=url, model="fake-embed", api_key_env="", max_retries=1),
        clock=lambda: now[0], backoff_s=FAST))
    await memory.ingest("user:alice", "warm up the vector space")
    app.down = True
    item = await memory.ingest("user:alice", "the office is in Brno")  # acknowledged anyway
    assert memory.get(item.memory_id) == item  # journaled
    assert [e.kind for e in store.read_range(0, 100)].count("memory.ingested") == 2
    status = memory.status()
    assert status.pending == 1 and "503" in status.last_error
    alice = memory.visible("user:alice", "")
    [(found, hit)] = [h for h in await memory.asearch("Brno", alice)]
    assert found.memory_id == item.memory_id and hit.vector == 0.0  # BM25 and recency only
    assert memory.status().pending == 1  # the breaker is open now: failing fast
    app.down = False
    now[0] += 60.0  # the breaker lets a trial through
    hits = await memory.asearch("Brno office", alice)  # embeds the pending item first
    assert memory.status().pending == 0 and memory.status().last_error == ""
    assert hits[0][0].memory_id == item.memory_id and hits[0][1].vector == 1.0
    await memory.aclose()
    store.close()


async def test_changing_the_embedder_reembeds_instead_of_mixing_spaces(
        tmp_path: Path, fake: tuple[str, FakeEmbeddings]) -> None:
    url, app = fake
    store = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False))
    local = Memory(store, HashEmbedder())
    made = [await local.ingest("user:alice", text) for text in FACTS]
    assert local.status().space == "hash64/64"
    store.close()
    store = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False))
    remote = Memory(store, _embedder(url))
    remote.refresh()  # start: every item indexed, none embedded yet (no network here)
    assert remote.status().pending == len(FACTS) and not app.requests
    hits = await remote.asearch("deploy key", remote.visible("user:alice", ""))
    assert remote.status().pending == 0
    assert remote.status().space == f"openai:fake-embed/{DEFAULT_DIM}"
    assert hits[0][0].memory_id == made[3].memory_id and hits[0][1].vector == 1.0
    assert sum(len(body["input"]) for _h, body in app.requests) == len(FACTS) + 1  # + query
    await remote.aclose()
    store.close()


async def test_config_selects_the_endpoint(tmp_path: Path,
                                           fake: tuple[str, FakeEmbeddings]) -> None:
    url, app = fake
    toml = tmp_path / "palyra.toml"
    toml.write_text(f'[memory]\nembedder = "openai"\n\n[memory.openai]\nbase_url = "{url}"\n'
                    'model = "fake-embed"\napi_key_env = "FAKE_EMBED_KEY"\ndimensions = 16\n'
                    "timeout_s = 3\n")
    config = load_config(config_file=toml, env={})
    assert config.memory.embedder == "openai" and config.memory.openai.dimensions == 16
    with pytest.raises(PalyraError) as unset:
        build_embedder(config.memory, {})
    assert unset.value.code is ErrorCode.CONFIG_INVALID
    embedder = build_embedder(config.memory, {"FAKE_EMBED_KEY": "sk-from-env"})
    store = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False))
    memory = Memory(store, embedder)
    item = await memory.ingest("user:alice", "the office is in Brno")
    assert (await memory.asearch("office", memory.visible("user:alice", "")))[0][0] == item
    assert memory.status().space == "openai:fake-embed/16"
    assert app.requests[0][0]["authorization"] == "Bearer sk-from-env"
    await memory.aclose()
    store.close()
    env = {"PALYRA_MEMORY_EMBEDDER": "hash"}
    assert build_embedder(load_config(env=env).memory, {}).name == "hash64"
    for bad in ('[memory]\nembedder = "gpt"\n', '[memory.openai]\nbatch_size = 0\n',
                '[memory.openai]\nbase_url = "ftp://x"\n'):
        toml.write_text(bad)
        with pytest.raises(PalyraError) as invalid:
            load_config(config_file=toml, env={})
        assert invalid.value.code is ErrorCode.CONFIG_INVALID


async def test_the_background_loop_embeds_items_others_wrote(
        tmp_path: Path, fake: tuple[str, FakeEmbeddings]) -> None:
    from palyra.journal import EventDraft
    from palyra.memory import MemoryItem, Provenance, item_write

    url, app = fake
    store = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False))
    memory = Memory(store, _embedder(url))
    memory.start()
    item = MemoryItem(memory_id="mem1", kind="durable_fact", text="my cat is called Miso",
                      scope="principal", owner="user:a", created_ms=1,
                      provenance=Provenance(session_id="s", run_id="r", tape_seqs=[2],
                                            positions=[5], sha256="0" * 64, source="learning:x"))
    await store.append([EventDraft(kind="learning.candidate", actor="system:learning",
                                   entity_writes=(item_write(item),))])
    for _ in range(200):  # no search, no ingest: the loop finds and embeds it
        if app.requests:
            break
        await asyncio.sleep(0.05)
    assert [body["input"] for _h, body in app.requests] == [["my cat is called Miso"]]
    assert memory.status().pending == 0
    await memory.aclose()  # stops the loop
    store.close()


async def test_auto_inject_asks_nothing_for_a_principal_without_items(
        tmp_path: Path, fake: tuple[str, FakeEmbeddings]) -> None:
    from palyra.adapters import MemoryContext
    from palyra.engine import ContextRequest, IdentityRec
    from palyra.policy import PolicyConfig, PolicyGate

    url, app = fake
    store = JournalStore.open(tmp_path / "data", config=JournalConfig(sync=False))
    memory = Memory(store, _embedder(url))
    await memory.ingest("user:alice", "the office is in Brno")
    context = MemoryContext(memory, PolicyGate.load(PolicyConfig()))
    asked = len(app.requests)
    assert await context.assemble(ContextRequest(IdentityRec("user:bob"), "S", "R",
                                                 "where is the office")) == []
    assert len(app.requests) == asked  # no query embedding for bob, who has no items
    [part] = await context.assemble(ContextRequest(IdentityRec("user:alice"), "S", "R",
                                                   "where is the office"))
    assert "Brno" in part.content and len(app.requests) == asked + 1
    await memory.aclose()
    store.close()
