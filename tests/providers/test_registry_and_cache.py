"""The provider registry's names and routes, and the response cache's pure rules."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from palyra.config import load_config
from palyra.core.errors import ErrorCode, PalyraError
from palyra.providers import (
    CachedAnswer,
    ChatMessage,
    ModelRequest,
    ModelResponse,
    ProviderConfig,
    ProviderRegistry,
    Target,
    ToolCall,
    ToolSpecForModel,
    cacheable,
    decode_entry,
    encode_entry,
    parse_target,
    request_digest,
)


def test_providers_are_an_array_of_tables(tmp_path: Path) -> None:
    toml = tmp_path / "palyra.toml"
    toml.write_text('''
[provider]
kind = "scripted"

[[providers]]
name = "fast"
kind = "openai"
base_url = "http://127.0.0.1:9"
model = "small"
models = ["small", "large"]
max_retries = 0

[[providers]]
name = "claude"
kind = "anthropic"
api_key_env = "ANTHROPIC_KEY"
''')
    config = load_config(config_file=toml, env={})
    assert [(p.name, p.kind, p.models) for p in config.providers] == [
        ("fast", "openai", ("small", "large")), ("claude", "anthropic", ())]
    registry = ProviderRegistry.build(config.provider, config.providers[:1])
    assert registry.names == ["scripted", "fast"]
    # An unset key variable is refused when the provider is built, naming the variable.
    with pytest.raises(PalyraError) as unset:
        ProviderRegistry.build(config.provider, config.providers)
    assert unset.value.code is ErrorCode.CONFIG_INVALID and "ANTHROPIC_KEY" in unset.value.message


@pytest.mark.parametrize("others", [
    [ProviderConfig(kind="scripted")],  # no name
    [ProviderConfig(name="a"), ProviderConfig(name="a")],  # twice
    [ProviderConfig(name="a/b")],  # a '/' would split a route
    [ProviderConfig(name="scripted")],  # the default's name
])
def test_provider_names_are_required_and_unique(others: list[ProviderConfig]) -> None:
    with pytest.raises(PalyraError) as bad:
        ProviderRegistry.build(ProviderConfig(), others)
    assert bad.value.code is ErrorCode.CONFIG_INVALID


def test_routes_resolve_to_targets_with_their_models() -> None:
    registry = ProviderRegistry.build(ProviderConfig(model="m0"), [
        ProviderConfig(name="b", model="bm", models=("bm", "org/big"))])
    assert [t for t, _p in registry.resolve(())] == [Target("scripted", "m0")]
    assert [t for t, _p in registry.resolve(("b/org/big", "b", "/x"))] == [
        Target("b", "org/big"), Target("b", "bm"), Target("scripted", "x")]
    assert parse_target("b/org/big") == Target("b", "org/big")
    for route in (("nope",), ("b/other",)):
        with pytest.raises(PalyraError) as gone:
            registry.resolve(route)
        assert gone.value.code is ErrorCode.CONFIG_INVALID


def test_a_resolved_route_is_remembered_boundedly_and_handed_out_as_a_copy() -> None:
    """Each model call resolves its run's route: the registry answers a known one from
    memory, as a list its caller may change, and forgets when many routes were asked."""
    registry = ProviderRegistry.build(ProviderConfig(model="m0"), [
        ProviderConfig(name="b", model="bm")])
    registry.resolve(("b", "/x"))
    first = registry.resolve(("b", "/x"))  # from memory
    first.clear()  # a caller filters its candidates in place
    again = registry.resolve(("b", "/x"))
    assert [t for t, _p in again] == [Target("b", "bm"), Target("scripted", "x")]
    assert again[0][1] is registry.resolve(("b",))[0][1]
    for n in range(2_000):  # client-chosen routes: any number of distinct models
        registry.resolve((f"b/model-{n}",))
    assert len(registry._resolved) <= 256
    with pytest.raises(PalyraError):  # a failure is never remembered as an answer
        registry.resolve(("nope",))
    assert ("nope",) not in registry._resolved


REQUEST = ModelRequest(
    messages=[ChatMessage("user", "add 1"),
              ChatMessage("assistant", "", [ToolCall("01JABC", "add", {"a": 0, "b": 1})]),
              ChatMessage("tool", '{"value": 1}', tool_call_id="01JABC")],
    tools=[ToolSpecForModel("add", "adds", {"type": "object"})])
TARGET = Target("oa", "m")


def test_the_digest_covers_everything_that_shapes_the_answer() -> None:
    base = request_digest(TARGET, REQUEST)
    assert len(base) == 64
    changed = [
        request_digest(Target("other", "m"), REQUEST),
        request_digest(Target("oa", "m2"), REQUEST),
        request_digest(TARGET, ModelRequest(REQUEST.messages[:1], REQUEST.tools)),
        request_digest(TARGET, ModelRequest(REQUEST.messages, [])),
        request_digest(TARGET, ModelRequest(REQUEST.messages, REQUEST.tools, max_tokens=5)),
        request_digest(TARGET, ModelRequest(REQUEST.messages, REQUEST.tools, temperature=0.0)),
    ]
    assert base not in changed and len(set(changed)) == len(changed)


@given(st.text(min_size=1, max_size=26))
def test_tool_call_ids_do_not_change_the_digest(call_id: str) -> None:
    renamed = ModelRequest(
        messages=[REQUEST.messages[0],
                  ChatMessage("assistant", "", [ToolCall(call_id, "add", {"a": 0, "b": 1})]),
                  ChatMessage("tool", '{"value": 1}', tool_call_id=call_id)],
        tools=REQUEST.tools)
    assert request_digest(TARGET, renamed) == request_digest(TARGET, REQUEST)


def test_only_repeatable_requests_are_cacheable() -> None:
    assert cacheable(REQUEST)
    assert cacheable(ModelRequest(REQUEST.messages, temperature=0.0))
    assert not cacheable(ModelRequest(REQUEST.messages, temperature=0.7))


def test_entries_round_trip_and_garbage_is_no_entry() -> None:
    entry = CachedAnswer(response=ModelResponse("hi", [], "stop", model="m"), provider="oa",
                         digest="d" * 64, created_ms=5)
    assert decode_entry(encode_entry(entry)) == entry
    assert decode_entry(b"\x00garbage") is None
