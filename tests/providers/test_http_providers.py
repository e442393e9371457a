"""OpenAI and Anthropic providers against a real local fake vendor server."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import pytest

from palyra.core.errors import ErrorCode, PalyraError
from palyra.providers import (
    BreakerState,
    ChatMessage,
    Completed,
    ModelProvider,
    ModelRequest,
    ProviderConfig,
    ProviderKind,
    TextDelta,
    ToolSpecForModel,
    build_provider,
)

from .fake_vendor import FakeVendor

PROMPT = "Start from 0 and add 1 to the running total {k} times, then reply."
ADD = ToolSpecForModel(
    "add",
    "Add two numbers.",
    {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
)
KINDS: list[ProviderKind] = ["openai", "anthropic"]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _provider(
    kind: ProviderKind, base_url: str, clock: FakeClock | None = None, **overrides: object
) -> ModelProvider:
    fields: dict[str, object] = {
        "kind": kind,
        "base_url": base_url,
        "model": "ok",
        "api_key_env": "PALYRA_TEST_KEY",
        "backoff_base_s": 0.001,
        "backoff_max_s": 0.002,
        "timeout_s": 5.0,
    }
    fields.update(overrides)
    config = ProviderConfig(**fields)  # type: ignore[arg-type]
    return build_provider(config, clock=clock or FakeClock())


@pytest.fixture(autouse=True)
def _api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PALYRA_TEST_KEY", "sk-test")


@pytest.mark.parametrize("kind", KINDS)
async def test_tool_loop_through_http(kind: ProviderKind, vendor: tuple[str, FakeVendor]) -> None:
    base_url, app = vendor
    provider = _provider(kind, base_url)
    messages = [ChatMessage("system", "sys"), ChatMessage("user", PROMPT.format(k=3))]
    try:
        for step in range(3):
            response = await provider.complete(ModelRequest(messages, [ADD]))
            assert response.finish_reason == "tool_calls"
            [call] = response.tool_calls
            assert (call.id, call.name) == (f"call_{step}", "add")
            assert call.arguments == {"a": step, "b": 1}
            result = f'{{"result": {step + 1}}}'
            messages += [
                ChatMessage("assistant", "", [call]),
                ChatMessage("tool", result, tool_call_id=call.id),
            ]
        final = await provider.complete(ModelRequest(messages, [ADD]))
    finally:
        await provider.aclose()
    assert (final.text, final.finish_reason, final.tool_calls) == ("result=3", "stop", [])
    assert final.usage.output_tokens > 0
    path, headers, body = app.requests[-1]
    assert body["stream"] is True
    if kind == "openai":
        assert path == "/v1/chat/completions"
        assert headers["authorization"] == "Bearer sk-test"
        assert body["tools"][0]["function"]["name"] == "add"
    else:
        assert path == "/v1/messages"
        assert headers["x-api-key"] == "sk-test"
        assert headers["anthropic-version"] == "2023-06-01"
        assert body["system"] == "sys"
        assert body["tools"][0]["input_schema"]["type"] == "object"
        # Three tool results → alternating user/assistant turns.
        roles = [m["role"] for m in body["messages"]]
        assert roles == ["user", "assistant", "user", "assistant", "user", "assistant", "user"]


@pytest.mark.parametrize("kind", KINDS)
async def test_streams_text_deltas(kind: ProviderKind, vendor: tuple[str, FakeVendor]) -> None:
    base_url, _ = vendor
    provider = _provider(kind, base_url)
    request = ModelRequest([ChatMessage("user", "echo these four words")])
    try:
        chunks = [c async for c in provider.stream(request)]
    finally:
        await provider.aclose()
    deltas = [c.text for c in chunks if isinstance(c, TextDelta)]
    assert len(deltas) == 4
    final = chunks[-1]
    assert isinstance(final, Completed)
    assert final.response.text == "".join(deltas) == "echo these four words"


@pytest.mark.parametrize("kind", KINDS)
async def test_retries_500_then_succeeds(
    kind: ProviderKind, vendor: tuple[str, FakeVendor]
) -> None:
    base_url, app = vendor
    model = f"fail500:{kind}-retry:2"
    provider = _provider(kind, base_url, model=model)
    try:
        response = await provider.complete(ModelRequest([ChatMessage("user", "hi")]))
    finally:
        await provider.aclose()
    assert response.text == "hi"
    assert app.counts[model] == 3  # two injected 500s + the success


@pytest.mark.parametrize("kind", KINDS)
async def test_retries_exhausted_then_breaker_opens(
    kind: ProviderKind, vendor: tuple[str, FakeVendor]
) -> None:
    base_url, app = vendor
    clock = FakeClock()
    model = f"fail500:{kind}-breaker:1000"
    provider = _provider(kind, base_url, clock, model=model)
    request = ModelRequest([ChatMessage("user", "hi")])
    try:
        for _ in range(3):
            with pytest.raises(PalyraError) as failed:
                await provider.complete(request)
            assert failed.value.code is ErrorCode.PROVIDER_UNAVAILABLE
            assert failed.value.details["http_status"] == "500"
        assert app.counts[model] == 9  # 3 calls x (1 + 2 retries)
        with pytest.raises(PalyraError, match="circuit breaker is open") as fast:
            await provider.complete(request)
        assert fast.value.code is ErrorCode.PROVIDER_UNAVAILABLE
        assert app.counts[model] == 9  # failed fast, no request sent
        clock.now += 30.0  # half-open: one trial call goes through (and fails)
        with pytest.raises(PalyraError, match="after 3 attempts"):
            await provider.complete(request)
        assert app.counts[model] == 12
        with pytest.raises(PalyraError, match="circuit breaker is open"):
            await provider.complete(request)
    finally:
        await provider.aclose()


@pytest.mark.parametrize("kind", KINDS)
async def test_breaker_closes_after_successful_trial(
    kind: ProviderKind, vendor: tuple[str, FakeVendor]
) -> None:
    base_url, _ = vendor
    clock = FakeClock()
    provider = _provider(kind, base_url, clock, model=f"fail500:{kind}-heal:9", max_retries=0)
    request = ModelRequest([ChatMessage("user", "hi")])
    try:
        for _ in range(9):
            with pytest.raises(PalyraError):
                await provider.complete(request)
            clock.now += 30.0
        response = await provider.complete(request)  # 10th request: healthy
    finally:
        await provider.aclose()
    assert response.text == "hi"
    assert provider.breaker.state is BreakerState.CLOSED  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("status", "code"),
    [(400, ErrorCode.INVALID_ARGUMENT), (401, ErrorCode.CONFIG_INVALID)],
)
async def test_client_errors_not_retried(
    status: int, code: ErrorCode, vendor: tuple[str, FakeVendor]
) -> None:
    base_url, app = vendor
    model = f"status:{status}"
    provider = _provider("openai", base_url, model=model)
    before = app.counts[model]
    try:
        with pytest.raises(PalyraError) as failed:
            await provider.complete(ModelRequest([ChatMessage("user", "hi")]))
    finally:
        await provider.aclose()
    assert failed.value.code is code
    assert app.counts[model] == before + 1
    assert provider.breaker.state is BreakerState.CLOSED  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", KINDS)
async def test_hang_times_out(kind: ProviderKind, vendor: tuple[str, FakeVendor]) -> None:
    base_url, app = vendor
    provider = _provider(kind, base_url, model="hang", timeout_s=0.2, max_retries=1)
    before = app.counts["hang"]
    try:
        with pytest.raises(PalyraError) as failed:
            await provider.complete(ModelRequest([ChatMessage("user", "hi")]))
    finally:
        await provider.aclose()
    assert failed.value.code is ErrorCode.DEADLINE_EXCEEDED
    assert app.counts["hang"] == before + 2


@pytest.mark.parametrize("kind", KINDS)
async def test_stream_cut_short_is_an_error(
    kind: ProviderKind, vendor: tuple[str, FakeVendor]
) -> None:
    base_url, _ = vendor
    provider = _provider(kind, base_url, model="cut")
    seen: list[str] = []
    try:
        with pytest.raises(PalyraError) as failed:
            async for chunk in provider.stream(ModelRequest([ChatMessage("user", "a b c")])):
                assert isinstance(chunk, TextDelta)
                seen.append(chunk.text)
    finally:
        await provider.aclose()
    assert failed.value.code is ErrorCode.PROVIDER_UNAVAILABLE
    assert seen == ["a "]  # streamed once, not retried after output reached us


@pytest.mark.parametrize("kind", KINDS)
async def test_cancel_mid_stream_releases_connection(
    kind: ProviderKind, vendor: tuple[str, FakeVendor]
) -> None:
    base_url, app = vendor
    app.disconnected.clear()
    provider = _provider(kind, base_url, model="slow")
    first = asyncio.Event()

    async def consume() -> None:
        async with aclosing(provider.stream(ModelRequest([ChatMessage("user", "a b")]))) as s:
            async for _ in s:
                first.set()

    task = asyncio.create_task(consume())
    await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The server sees the client go away: the connection was released, not leaked.
    assert await asyncio.to_thread(app.disconnected.wait, 5)
    assert provider.breaker.state is BreakerState.CLOSED  # type: ignore[attr-defined]
    await provider.aclose()


def test_missing_api_key_env_is_config_invalid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PALYRA_TEST_KEY")
    with pytest.raises(PalyraError, match="PALYRA_TEST_KEY") as failed:
        _provider("openai", "http://127.0.0.1:9")
    assert failed.value.code is ErrorCode.CONFIG_INVALID


async def test_connection_refused_is_provider_unavailable() -> None:
    provider = _provider("anthropic", "http://127.0.0.1:9", max_retries=1)
    try:
        with pytest.raises(PalyraError) as failed:
            await provider.complete(ModelRequest([ChatMessage("user", "hi")]))
    finally:
        await provider.aclose()
    assert failed.value.code is ErrorCode.PROVIDER_UNAVAILABLE
    assert failed.value.details["attempts"] == "2"
