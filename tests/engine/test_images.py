"""An image turn: attachments stored by digest with their sniffed type and size, sent as
OpenAI and Anthropic content parts, described by the scripted model, refused clearly for a
provider without vision."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from engine_harness import ADMIN, USER, Harness, run_to_end
from palyra_gen.palyra import v1 as pb
from PIL import Image
from providers.fake_vendor import FakeVendor, serve_fake_vendor

from palyra.core.errors import ErrorCode, PalyraError
from palyra.core.images import sniff
from palyra.providers import ProviderConfig, ProviderRegistry


@pytest.fixture(scope="module")
def vendor() -> Iterator[tuple[str, FakeVendor]]:
    with serve_fake_vendor() as served:
        yield served


def png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (10, 120, 200)).save(out, "PNG")
    return out.getvalue()


def registry(base: str) -> ProviderRegistry:
    return ProviderRegistry.build(ProviderConfig(), [
        ProviderConfig(name="oa", kind="openai", base_url=base, model="ok"),
        ProviderConfig(name="an", kind="anthropic", base_url=base, model="ok"),
        ProviderConfig(name="blind", kind="openai", base_url=base, model="blind", vision=False),
    ])


def image_input(text: str, *images: bytes) -> pb.MessageInput:
    # The client's MIME type and name are wrong on purpose: the bytes decide.
    return pb.MessageInput(text=text, attachments=[
        pb.Attachment(name=f"file{i}.txt", mime_type="text/plain", data=d)
        for i, d in enumerate(images)])


async def test_an_image_turn_on_every_provider(harness: Harness,
                                               vendor: tuple[str, FakeVendor]) -> None:
    base, fake = vendor
    harness.models_factory = lambda: registry(base)
    app = await harness.start()
    wide, tall = png(4, 3), png(2, 5)
    expected = (f"look\nimage 1: image/png 4x3 sha256:{sniff(wide).sha256[:12]}; "
                f"image 2: image/png 2x5 sha256:{sniff(tall).sha256[:12]}")
    for provider in ("", "oa", "an"):
        agent_id = ""
        if provider:
            made = (await app.create_agent(ADMIN, pb.CreateAgentRequest(agent=pb.Agent(
                display_name=provider, provider=provider)))).agent
            assert made is not None
            agent_id = made.agent_id
        created = await app.create_run(USER, pb.CreateRunRequest(
            input=image_input("look", wide, tall), agent_id=agent_id, complete=True, wait=True))
        run = (await app.get_run(USER, pb.GetRunRequest(run_id=created.run.run_id))).run
        # The vendor decoded the bytes it was sent and described them: they arrived intact.
        assert run.final_text == expected, provider
        [user_input] = [m for m in harness.members(run.run_id) if isinstance(m, pb.UserInput)]
        assert [(a.mime_type, a.width, a.height, a.sha256, a.name)
                for a in user_input.attachments] == [
            ("image/png", 4, 3, sniff(wide).sha256, "file0.txt"),
            ("image/png", 2, 5, sniff(tall).sha256, "file1.txt")]
    # The same bytes are stored once (content-addressed); each run takes its references.
    assert harness.store is not None
    stored = [e for e in harness.store.read_range(0, 10_000) if e.kind == "attachment.stored"]
    both = sorted([sniff(wide).sha256, sniff(tall).sha256])
    assert [sorted(e.payload["sha256"]) for e in stored] == [both, [], []]
    assert [e.payload["referenced"] for e in stored] == [both] * 3
    assert len({e.run_id for e in stored}) == 3
    openai_body = next(b for p, _h, b in fake.requests if p == "/v1/chat/completions")
    parts = openai_body["messages"][-1]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url", "image_url"]
    assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,")
    anthropic_body = next(b for p, _h, b in fake.requests if p == "/v1/messages")
    blocks = anthropic_body["messages"][-1]["content"]
    assert [b["type"] for b in blocks] == ["text", "image", "image"]
    assert blocks[1]["source"]["media_type"] == "image/png"


async def test_a_provider_without_vision_is_refused_before_any_call(
        harness: Harness, vendor: tuple[str, FakeVendor]) -> None:
    base, fake = vendor
    harness.models_factory = lambda: registry(base)
    app = await harness.start()
    made = (await app.create_agent(ADMIN, pb.CreateAgentRequest(agent=pb.Agent(
        display_name="blind", provider="blind")))).agent
    assert made is not None
    before = fake.counts["blind"]
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=image_input("look", png(3, 3)), agent_id=made.agent_id, complete=True, wait=True))
    run = (await app.get_run(USER, pb.GetRunRequest(run_id=created.run.run_id))).run
    assert run.state == pb.RunState.FAILED
    assert run.last_error is not None and run.last_error.code == pb.ErrorCode.INVALID_ARGUMENT
    assert "accepts images" in run.last_error.message
    assert fake.counts["blind"] == before  # never asked
    # Text alone still goes to it.
    assert (await run_to_end(app, "just text", agent_id=made.agent_id)).state == pb.RunState.DONE


async def test_what_is_not_an_image_is_refused_before_anything_is_journaled(
        harness: Harness) -> None:
    app = await harness.start()
    assert harness.store is not None
    head = harness.store.head()
    with pytest.raises(PalyraError) as refused:
        await app.create_run(USER, pb.CreateRunRequest(input=image_input("x", b"%PDF-1.7")))
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT
    assert "file0.txt" in refused.value.message
    assert harness.store.head() == head
