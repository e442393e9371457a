"""Agents: operators manage them and their bindings; a run served by an agent starts with its
system prompt and obeys its tool postures (under the session's); routing is deterministic."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_harness import ADMIN, USER, Harness, loop_text
from hypothesis import given
from hypothesis import strategies as st
from palyra_gen.palyra import v1 as pb
from planned_provider import PlannedProvider, reply

from palyra.adapters import AgentPrompt
from palyra.agents import AgentRegistry, BindingRecord, bound_agent
from palyra.core.errors import ErrorCode, PalyraError
from palyra.providers import ScriptedProvider


async def test_operators_manage_agents_and_bindings(harness: Harness) -> None:
    app = await harness.start()
    made = await app.create_agent(ADMIN, pb.CreateAgentRequest(agent=pb.Agent(
        display_name="Support", system_prompt="You answer support questions.",
        tool_postures={"add": pb.ToolPosture.ASK_EACH_TIME})))
    assert made.agent is not None and made.agent.agent_id
    agent_id = made.agent.agent_id
    with pytest.raises(PalyraError) as denied:
        await app.create_agent(USER, pb.CreateAgentRequest(agent=pb.Agent(display_name="x")))
    assert denied.value.code is ErrorCode.PERMISSION_DENIED
    with pytest.raises(PalyraError) as bad:
        await app.create_agent(ADMIN, pb.CreateAgentRequest(agent=pb.Agent(display_name=" ")))
    assert bad.value.code is ErrorCode.INVALID_ARGUMENT
    updated = await app.update_agent(ADMIN, pb.UpdateAgentRequest(agent_id=agent_id, agent=pb.Agent(
        display_name="Support v2", system_prompt="Be brief.")))
    assert updated.agent is not None and updated.agent.display_name == "Support v2"
    assert updated.agent.created_at_unix_ms == made.agent.created_at_unix_ms
    bound = await app.bind_agent(ADMIN, pb.BindAgentRequest(
        agent_id=agent_id, binding=pb.AgentBinding(channel="slack:T1", conversation_id="C*")))
    assert bound.binding is not None
    listed = await app.list_agent_bindings(ADMIN, pb.ListAgentBindingsRequest(agent_id=agent_id))
    assert [b.binding_id for b in listed.bindings] == [bound.binding.binding_id]
    assert (await app.list_agents(ADMIN, pb.ListAgentsRequest())).agents[0].agent_id == agent_id
    assert (await app.unbind_agent(ADMIN, pb.UnbindAgentRequest(
        agent_id=agent_id, binding_id=bound.binding.binding_id))).removed
    assert (await app.delete_agent(ADMIN, pb.DeleteAgentRequest(agent_id=agent_id))).deleted
    with pytest.raises(PalyraError) as gone:
        await app.get_agent(ADMIN, pb.GetAgentRequest(agent_id=agent_id))
    assert gone.value.code is ErrorCode.NOT_FOUND


async def test_a_run_uses_its_agents_prompt_and_postures(harness: Harness) -> None:
    provider = PlannedProvider(lambda request: reply("hello from support"))
    harness.provider_factory = lambda: provider
    harness.context_factory = lambda store, gate: AgentPrompt(AgentRegistry(store))
    app = await harness.start()
    made = await app.create_agent(ADMIN, pb.CreateAgentRequest(agent=pb.Agent(
        display_name="Support", system_prompt="You are the support agent.")))
    assert made.agent is not None
    run = await app.create_run(USER, pb.CreateRunRequest(
        v=1, session_key="s", input=pb.MessageInput(text="hi"), agent_id=made.agent.agent_id,
        complete=True, wait=True))
    assert run.run is not None
    [system] = [m.content for m in provider.requests[0].messages if m.role == "system"]
    assert system == "You are the support agent."
    # A session key bound to the agent is served by it without naming it.
    await app.bind_agent(ADMIN, pb.BindAgentRequest(agent_id=made.agent.agent_id,
                                                    binding=pb.AgentBinding(session_key="bound")))
    await app.create_run(USER, pb.CreateRunRequest(
        v=1, session_key="bound", input=pb.MessageInput(text="hi"), complete=True, wait=True))
    assert [m.content for m in provider.requests[-1].messages if m.role == "system"] == [
        "You are the support agent."]
    with pytest.raises(PalyraError) as missing:
        await app.create_run(USER, pb.CreateRunRequest(
            v=1, input=pb.MessageInput(text="hi"), agent_id="01J00000000000000000000009"))
    assert missing.value.code is ErrorCode.NOT_FOUND


async def test_an_agents_tool_list_disables_the_rest(harness: Harness) -> None:
    harness.provider_factory = ScriptedProvider
    app = await harness.start()
    made = await app.create_agent(ADMIN, pb.CreateAgentRequest(agent=pb.Agent(
        display_name="Echo only", tools=["echo"])))
    assert made.agent is not None
    run = await app.create_run(USER, pb.CreateRunRequest(
        v=1, session_key="t", input=pb.MessageInput(text=loop_text(1)),
        agent_id=made.agent.agent_id, complete=True, wait=True))
    assert run.run is not None
    results = [m for m in harness.members(run.run.run_id) if isinstance(m, pb.ToolResult)]
    assert results and not results[0].success and results[0].error.startswith("denied")


_binding = st.builds(BindingRecord, binding_id=st.text("ABC", min_size=1, max_size=2),
                     agent_id=st.sampled_from(["a1", "a2", "a3"]),
                     channel=st.sampled_from(["", "slack:T1", "webhook:w"]),
                     conversation_id=st.sampled_from(["", "C1", "C*", "D?"]),
                     session_key=st.sampled_from(["", "k1", "k2"]))


@given(bindings=st.lists(_binding, max_size=6), channel=st.sampled_from(["slack:T1", "x"]),
       conversation=st.sampled_from(["", "C1", "C2", "D1"]),
       key=st.sampled_from(["", "k1", "k3"]))
def test_routing_is_deterministic_and_prefers_the_most_specific(
        bindings: list[BindingRecord], channel: str, conversation: str, key: str) -> None:
    chosen = bound_agent(bindings, channel=channel, conversation_id=conversation, session_key=key)
    assert chosen == bound_agent(list(reversed(bindings)), channel=channel,
                                 conversation_id=conversation, session_key=key)
    by_key = [b for b in bindings if b.session_key and b.session_key == key]
    if by_key:
        assert chosen in {b.agent_id for b in by_key}
    if not bindings:
        assert chosen == ""


async def test_the_bindings_list_is_never_served_past_a_write(tmp_path: Path) -> None:
    """Every new run asks for every binding; the registry keeps the list per version of
    the ``agents`` table, and any write to it (by any registry on the store) is seen."""
    from palyra.agents import AgentRecord
    from palyra.journal import EntityWrite, EventDraft, JournalStore

    async with JournalStore.open(tmp_path / "data") as store:
        mine, other = AgentRegistry(store), AgentRegistry(store)
        agent = await other.create(AgentRecord(agent_id="", display_name="A"), "admin:t")
        assert mine.bindings() == []
        first = await other.bind(agent.agent_id, BindingRecord(
            binding_id="", agent_id="", session_key="k1"), "admin:t")
        assert [b.binding_id for b in mine.bindings()] == [first.binding_id]
        assert mine.bindings() == mine.bindings()  # served again, unchanged
        second = await mine.bind(agent.agent_id, BindingRecord(
            binding_id="", agent_id="", channel="slack:T1"), "admin:t")
        assert {b.binding_id for b in other.bindings()} == {first.binding_id, second.binding_id}
        assert await other.unbind(agent.agent_id, first.binding_id, "admin:t")
        assert [b.binding_id for b in mine.bindings()] == [second.binding_id]
        # A write to the table from outside the registry (as a restore would make).
        await store.append([EventDraft("agent.unbound", "admin:t", payload={}, entity_writes=(
            EntityWrite("agents", f"binding:{agent.agent_id}:{second.binding_id}", None),))])
        assert mine.bindings() == []
        mine.bindings().append(first)  # a caller's list is its own
        assert mine.bindings() == []


async def test_a_client_chosen_agent_id_is_refused_not_replaced(harness: Harness) -> None:
    app = await harness.start()
    with pytest.raises(PalyraError) as chosen:
        await app.create_agent(ADMIN, pb.CreateAgentRequest(agent=pb.Agent(
            agent_id="my-agent", display_name="Mine")))
    assert chosen.value.code is ErrorCode.INVALID_ARGUMENT
    assert "chosen by the daemon" in chosen.value.message
    assert (await app.list_agents(ADMIN, pb.ListAgentsRequest())).agents == []
    made = await app.create_agent(ADMIN, pb.CreateAgentRequest(agent=pb.Agent(display_name="A")))
    assert made.agent is not None
    same = await app.update_agent(ADMIN, pb.UpdateAgentRequest(agent_id=made.agent.agent_id,
                                                               agent=pb.Agent(
        agent_id=made.agent.agent_id, display_name="B")))
    assert same.agent is not None and same.agent.display_name == "B"
    with pytest.raises(PalyraError) as other:
        await app.update_agent(ADMIN, pb.UpdateAgentRequest(agent_id=made.agent.agent_id,
                                                             agent=pb.Agent(agent_id="x")))
    assert other.value.code is ErrorCode.INVALID_ARGUMENT


async def test_get_run_shows_the_runs_agent(harness: Harness) -> None:
    app = await harness.start()
    made = await app.create_agent(ADMIN, pb.CreateAgentRequest(agent=pb.Agent(display_name="A")))
    assert made.agent is not None
    created = await app.create_run(USER, pb.CreateRunRequest(
        v=1, session_key="agent-run", agent_id=made.agent.agent_id,
        input=pb.MessageInput(text="hello"), complete=True, wait=True))
    assert created.run is not None and created.run.agent_id == made.agent.agent_id
    got = await app.get_run(USER, pb.GetRunRequest(run_id=created.run.run_id))
    assert got.run is not None and got.run.agent_id == made.agent.agent_id
