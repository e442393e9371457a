"""Usage and budgets: tokens and cost per call on the tape, summed per run, session, agent and
principal in the same commit, budgets that warn or refuse."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from engine_harness import ADMIN, USER, Harness, loop_text, run_to_end
from palyra_gen.palyra import v1 as pb
from providers.fake_vendor import FakeVendor, serve_fake_vendor

from palyra.core.errors import ErrorCode, PalyraError
from palyra.providers import ProviderConfig, ProviderRegistry
from palyra.usage import Budget, Price, UsageConfig, cost_micros

PRICES = (Price("oa", "ok", input_per_mtok=2_500_000, output_per_mtok=10_000_000,
                cached_input_per_mtok=1_250_000),
          Price("oa", "*", input_per_mtok=1))


@pytest.fixture(scope="module")
def vendor() -> Iterator[tuple[str, FakeVendor]]:
    with serve_fake_vendor() as served:
        yield served


def use(harness: Harness, base: str, *budgets: Budget) -> None:
    harness.models_factory = lambda: ProviderRegistry.build(ProviderConfig(), [
        ProviderConfig(name="oa", kind="openai", base_url=base, model="ok")])
    harness.usage = UsageConfig(prices=PRICES, budgets=budgets)


def outputs(harness: Harness, run_id: str) -> list[pb.ProviderTurnOutput]:
    return [m for m in harness.members(run_id) if isinstance(m, pb.ProviderTurnOutput)]


def lines(answer: pb.GetUsageResponse) -> dict[tuple[str, str], pb.UsageTotals]:
    return {(line.scope, line.period.split(":")[0]): line.totals for line in answer.lines
            if line.totals is not None}


async def test_each_call_is_priced_on_the_tape_and_summed_everywhere(
        harness: Harness, vendor: tuple[str, FakeVendor]) -> None:
    use(harness, vendor[0])
    app = await harness.start()
    agent = (await app.create_agent(ADMIN, pb.CreateAgentRequest(agent=pb.Agent(
        display_name="a", provider="oa")))).agent
    assert agent is not None
    run = await run_to_end(app, loop_text(2), agent_id=agent.agent_id)
    turns = outputs(harness, run.run_id)
    # The fake vendor's usage block: 7 prompt tokens (2 of them from its cache), 3 out.
    expected = cost_micros(PRICES, "oa", "ok", input_tokens=7, output_tokens=3,
                           cached_input_tokens=2)
    assert expected == -(-(5 * 2_500_000 + 2 * 1_250_000 + 3 * 10_000_000) // 1_000_000)
    assert [(t.input_tokens, t.output_tokens, t.cached_input_tokens, t.cost_micros)
            for t in turns] == [(7, 3, 2, expected)] * 3
    other = await run_to_end(app, "just text")  # the scripted default: unpriced
    assert [t.cost_micros for t in outputs(harness, other.run_id)] == [0]
    answer = await app.get_usage(USER, pb.GetUsageRequest(run_id=run.run_id,
                                                          session_id=run.session_id))
    got = lines(answer)
    assert (got["run", "all"].calls, got["run", "all"].input_tokens,
            got["run", "all"].cost_micros) == (3, 21, 3 * expected)
    assert got["session", "all"] == got["run", "all"]
    scripted = outputs(harness, other.run_id)[0]
    for period in ("day", "month", "all"):
        assert got["principal", period].calls == 4
        assert got["principal", period].input_tokens == 21 + scripted.input_tokens
        assert got["principal", period].cost_micros == 3 * expected
    by_agent = lines(await app.get_usage(ADMIN, pb.GetUsageRequest(
        principal="user:alice", agent_id=agent.agent_id)))
    assert by_agent["agent", "day"] == got["run", "all"]
    # The sums are rebuilt from the journal at start.
    app = await harness.restart()
    assert lines(await app.get_usage(USER, pb.GetUsageRequest()))["principal", "day"] == \
        got["principal", "day"]


async def test_usage_is_the_callers_own(harness: Harness, vendor: tuple[str, FakeVendor]) -> None:
    use(harness, vendor[0])
    app = await harness.start()
    for request in (pb.GetUsageRequest(principal="user:bob"), pb.GetUsageRequest(agent_id="a")):
        with pytest.raises(PalyraError) as denied:
            await app.get_usage(USER, request)
        assert denied.value.code is ErrorCode.PERMISSION_DENIED
    with pytest.raises(PalyraError) as bad:
        await app.get_usage(USER, pb.GetUsageRequest(day="27/11/2026"))
    assert bad.value.code is ErrorCode.INVALID_ARGUMENT


async def test_a_suggested_budget_warns_on_the_tape(
        harness: Harness, vendor: tuple[str, FakeVendor]) -> None:
    use(harness, vendor[0], Budget(scope="principal", subject="user:alice", tokens=5))
    app = await harness.start()
    first = await run_to_end(app, "one two three four five six")
    assert [t.budget_warnings for t in outputs(harness, first.run_id)] == [[]]
    second = await run_to_end(app, "again")
    assert second.state == pb.RunState.DONE
    [warning] = outputs(harness, second.run_id)[0].budget_warnings
    assert warning.startswith("suggest day budget of principal user:alice (")
    status = (await app.get_usage(USER, pb.GetUsageRequest())).budgets
    assert [(b.mode, b.exhausted, b.limit_tokens) for b in status] == [("suggest", True, 5)]


async def test_an_enforced_budget_refuses_new_work_and_ends_a_running_loop(
        harness: Harness, vendor: tuple[str, FakeVendor]) -> None:
    # 7 + 3 tokens per OpenAI call: the second call of a loop finds 10 of 15 spent, the
    # third finds 20 and is refused.
    use(harness, vendor[0], Budget(scope="agent", subject="*", period="month", tokens=15,
                                   mode="enforced"))
    app = await harness.start()
    agent = (await app.create_agent(ADMIN, pb.CreateAgentRequest(agent=pb.Agent(
        display_name="a", provider="oa")))).agent
    assert agent is not None
    run = await run_to_end(app, loop_text(3), agent_id=agent.agent_id)
    assert run.state == pb.RunState.FAILED and run.end_reason == "budget_exhausted"
    assert run.last_error is not None and run.last_error.code == pb.ErrorCode.BUDGET_EXHAUSTED
    assert "enforced month budget of agent" in run.last_error.message
    assert len(outputs(harness, run.run_id)) == 2  # the third call was never made
    with pytest.raises(PalyraError) as refused:
        await app.create_run(USER, pb.CreateRunRequest(
            input=pb.MessageInput(text="more"), agent_id=agent.agent_id))
    assert refused.value.code is ErrorCode.BUDGET_EXHAUSTED
    assert refused.value.details["subject"] == agent.agent_id
    # Another agent (and no agent) is not held by this agent's budget.
    assert (await run_to_end(app, "free")).state == pb.RunState.DONE
