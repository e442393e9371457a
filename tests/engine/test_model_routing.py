"""Models per agent: the provider registry, failover between model calls, the response cache.

Every HTTP provider here is the real OpenAI or Anthropic client talking to a fake vendor on
loopback (real HTTP, the vendors' streaming shapes with tool calls and usage blocks).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from engine_harness import ADMIN, USER, Harness, loop_text, run_to_end
from palyra_gen.palyra import v1 as pb
from providers.fake_vendor import FakeVendor, serve_fake_vendor

from palyra.core.errors import ErrorCode, PalyraError
from palyra.providers import ProviderConfig, ProviderRegistry


@pytest.fixture(scope="module")
def vendor() -> Iterator[tuple[str, FakeVendor]]:
    with serve_fake_vendor() as served:
        yield served


def registry(base: str) -> ProviderRegistry:
    """The default scripted model, an OpenAI-compatible and an Anthropic provider, and an
    OpenAI-compatible one that is down (no retries, its breaker opens after 2 failures)."""
    quick = {"max_retries": 0, "backoff_base_s": 0.01, "breaker_failure_threshold": 2}
    return ProviderRegistry.build(ProviderConfig(), [
        ProviderConfig(name="oa", kind="openai", base_url=base, model="ok"),
        ProviderConfig(name="an", kind="anthropic", base_url=base, model="ok",
                       models=("ok", "failafter:an:1"), max_retries=1, backoff_base_s=0.01),
        ProviderConfig(name="down", kind="openai", base_url=base, model="status:503", **quick),
        ProviderConfig(name="refuses", kind="openai", base_url=base, model="status:400",
                       **quick),
    ])


def outputs(harness: Harness, run_id: str) -> list[pb.ProviderTurnOutput]:
    return [m for m in harness.members(run_id) if isinstance(m, pb.ProviderTurnOutput)]


async def agent(harness: Harness, **fields: object) -> str:
    assert harness.app is not None
    made = await harness.app.create_agent(ADMIN, pb.CreateAgentRequest(
        agent=pb.Agent(display_name="a", **fields)))  # type: ignore[arg-type]
    assert made.agent is not None
    return made.agent.agent_id


async def test_each_agent_is_answered_by_its_own_provider_and_model(
        harness: Harness, vendor: tuple[str, FakeVendor]) -> None:
    base, fake = vendor
    harness.models_factory = lambda: registry(base)
    app = await harness.start()
    to_openai = await agent(harness, provider="oa")
    to_anthropic = await agent(harness, provider="an", model="ok")
    seen = len(fake.requests)
    run = await run_to_end(app, loop_text(2), agent_id=to_openai)
    assert run.state == pb.RunState.DONE and run.final_text.endswith("2")
    # Two tool calls and the answer: three calls, all to OpenAI's path with the configured model.
    assert [(p, b["model"]) for p, _h, b in fake.requests[seen:]] == [
        ("/v1/chat/completions", "ok")] * 3
    assert {(o.provider, o.model) for o in outputs(harness, run.run_id)} == {("oa", "ok")}
    assert [o.input_tokens for o in outputs(harness, run.run_id)] == [7, 7, 7]
    seen = len(fake.requests)
    run = await run_to_end(app, loop_text(1), agent_id=to_anthropic)
    assert run.final_text.endswith("1")
    assert [p for p, _h, _b in fake.requests[seen:]] == ["/v1/messages"] * 2
    assert {(o.provider, o.model) for o in outputs(harness, run.run_id)} == {("an", "ok")}
    # No agent: the default provider, named by its kind.
    seen = len(fake.requests)
    run = await run_to_end(app, "hello there")
    assert fake.requests[seen:] == []
    assert [(o.provider, o.model) for o in outputs(harness, run.run_id)] == [
        ("scripted", "scripted")]


async def test_an_agent_may_name_only_what_the_daemon_serves(
        harness: Harness, vendor: tuple[str, FakeVendor]) -> None:
    harness.models_factory = lambda: registry(vendor[0])
    await harness.start()
    for fields, field in (({"provider": "nope"}, "agent.provider"),
                          ({"provider": "an", "model": "claude-x"}, "agent.provider"),
                          ({"provider": "oa", "fallbacks": ["an/claude-x"]}, "agent.fallbacks"),
                          ({"provider": "oa", "fallbacks": [" "]}, "fallbacks")):
        with pytest.raises(PalyraError) as bad:
            await agent(harness, **fields)
        assert bad.value.code is ErrorCode.INVALID_ARGUMENT
        assert bad.value.details["field"] == field
    made = await agent(harness, provider="oa", model="m1", fallbacks=["an", "/scripted"],
                       response_cache=True)
    assert harness.app is not None
    got = (await harness.app.get_agent(ADMIN, pb.GetAgentRequest(agent_id=made))).agent
    assert got is not None
    assert (got.provider, got.model, got.fallbacks, got.response_cache) == (
        "oa", "m1", ["an", "/scripted"], True)


async def test_failover_mid_conversation_then_the_circuit_opens(
        harness: Harness, vendor: tuple[str, FakeVendor]) -> None:
    base, fake = vendor
    harness.models_factory = lambda: registry(base)
    app = await harness.start()
    agent_id = await agent(harness, provider="down", fallbacks=["an"])
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text="first"), agent_id=agent_id, wait=True))
    run_id = created.run.run_id
    for text in ("second", "third"):
        await app.send_run_input(USER, pb.SendRunInputRequest(
            run_id=run_id, input=pb.MessageInput(text=text), wait=True))
    await app.complete_run(USER, pb.CompleteRunRequest(run_id=run_id, wait=True))
    turns = outputs(harness, run_id)
    assert [o.text for o in turns] == ["first", "second", "third"]
    assert {(o.provider, o.model) for o in turns} == {("an", "ok")}
    # Every turn names the provider passed over and why.
    assert [[(f.provider, f.model, f.code) for f in o.failovers] for o in turns] == [
        [("down", "status:503", pb.ErrorCode.PROVIDER_UNAVAILABLE)]] * 3
    assert "503" in turns[0].failovers[0].message
    # Two failures opened the circuit: the third turn did not ask the dead vendor at all.
    assert "circuit breaker is open" in turns[2].failovers[0].message
    assert fake.counts["status:503"] == 2


async def test_failover_happens_between_model_calls_and_never_repeats_a_tool_call(
        harness: Harness, vendor: tuple[str, FakeVendor]) -> None:
    base, fake = vendor
    harness.models_factory = lambda: registry(base)
    app = await harness.start()
    # The primary answers the first call (a tool call), then fails: the scripted default
    # takes over from the tool's result.
    agent_id = await agent(harness, provider="an", model="failafter:an:1",
                           fallbacks=["scripted"])
    run = await run_to_end(app, loop_text(2), agent_id=agent_id)
    assert run.state == pb.RunState.DONE and run.final_text.endswith("2")
    turns = outputs(harness, run.run_id)
    # Each later call asks the primary first again (its circuit is still closed).
    assert [(o.provider, len(o.failovers)) for o in turns] == [
        ("an", 0), ("scripted", 1), ("scripted", 1)]
    results = [m for m in harness.members(run.run_id) if isinstance(m, pb.ToolResult)]
    assert len(results) == 2  # one per tool call: nothing ran twice
    # One answer, then two calls refused twice each (its own retry, then the failover).
    assert fake.counts["failafter:an:1"] == 1 + 2 * 2


async def test_a_refused_request_does_not_fail_over(
        harness: Harness, vendor: tuple[str, FakeVendor]) -> None:
    harness.models_factory = lambda: registry(vendor[0])
    app = await harness.start()
    agent_id = await agent(harness, provider="refuses", fallbacks=["scripted"])
    run = await run_to_end(app, "hello", agent_id=agent_id)
    assert run.state == pb.RunState.FAILED
    assert run.last_error is not None and run.last_error.code == pb.ErrorCode.INVALID_ARGUMENT
    assert "HTTP 400" in run.last_error.message
    assert outputs(harness, run.run_id) == []


async def test_the_response_cache_serves_repeats_from_the_journal(
        harness: Harness, vendor: tuple[str, FakeVendor]) -> None:
    base, fake = vendor
    harness.models_factory = lambda: registry(base)
    app = await harness.start()
    cached = await agent(harness, provider="oa", model="cache-me", response_cache=True)
    uncached = await agent(harness, provider="oa", model="no-cache")
    first = await run_to_end(app, loop_text(1), agent_id=cached)
    assert fake.counts["cache-me"] == 2
    again = await run_to_end(app, loop_text(1), agent_id=cached)
    assert fake.counts["cache-me"] == 2  # both calls answered from the journal
    assert again.final_text == first.final_text
    assert [o.cached for o in outputs(harness, first.run_id)] == [False, False]
    assert [(o.cached, o.provider, o.model) for o in outputs(harness, again.run_id)] == [
        (True, "oa", "cache-me")] * 2
    # The tool still ran: the cache answers model calls, never tool calls.
    assert len([m for m in harness.members(again.run_id) if isinstance(m, pb.ToolResult)]) == 1
    # A different request misses; so does every request of an agent without the cache.
    await run_to_end(app, loop_text(2), agent_id=cached)
    assert fake.counts["cache-me"] == 2 + 3
    await run_to_end(app, loop_text(1), agent_id=uncached)
    await run_to_end(app, loop_text(1), agent_id=uncached)
    assert fake.counts["no-cache"] == 4
    # Served from the journal: a restarted daemon still has it.
    app = await harness.restart()
    after = await run_to_end(app, loop_text(1), agent_id=cached)
    assert fake.counts["cache-me"] == 5
    assert [o.cached for o in outputs(harness, after.run_id)] == [True, True]


async def test_a_run_may_pick_its_model_within_what_cedar_permits(
        harness: Harness, vendor: tuple[str, FakeVendor]) -> None:
    harness.models_factory = lambda: registry(vendor[0])
    app = await harness.start()
    agent_id = await agent(harness, provider="oa", fallbacks=["an"])
    # A user may pick what the agent already routes to ...
    run = await run_to_end(app, "pick", agent_id=agent_id, model="an")
    assert [(o.provider, o.model) for o in outputs(harness, run.run_id)] == [("an", "ok")]
    # ... not anything else: Cedar model.select says who may.
    with pytest.raises(PalyraError) as denied:
        await run_to_end(app, "pick", agent_id=agent_id, model="scripted")
    assert denied.value.code is ErrorCode.PERMISSION_DENIED
    assert "model scripted" in denied.value.message
    with pytest.raises(PalyraError) as unknown:
        await run_to_end(app, "pick", agent_id=agent_id, model="nope/x")
    assert unknown.value.code is ErrorCode.INVALID_ARGUMENT
    assert unknown.value.details["field"] == "model"
    # An operator may pick any model the daemon serves; the agent's fallbacks stay.
    run = await run_to_end(app, "pick", ADMIN, agent_id=agent_id, model="down")
    [turn] = outputs(harness, run.run_id)
    assert (turn.provider, [f.provider for f in turn.failovers]) == ("an", ["down"])
