"""Memory auto-inject: when a user input starts a loop, the run principal's relevant memory
reaches the model as a fenced block, and the tape says what was added, how many tokens
(with which tokenizer) and why; another principal's memory never does."""

from __future__ import annotations

import asyncio

import pytest
from engine_harness import ADMIN, OTHER_USER, USER, Harness
from palyra_gen.palyra import v1 as pb
from planned_provider import PlannedProvider, reply

from palyra.adapters import MemoryContext
from palyra.journal import JournalStore
from palyra.memory.service import Memory
from palyra.policy import PolicyGate


async def test_relevant_memory_is_injected_and_taped(harness: Harness) -> None:
    provider = PlannedProvider(lambda request: reply("noted"))
    harness.provider_factory = lambda: provider
    made: list[Memory] = []

    def context(store: JournalStore, gate: PolicyGate) -> MemoryContext:
        made.append(Memory(store))
        return MemoryContext(made[0], gate)

    harness.context_factory = context
    app = await harness.start()
    memory = made[0]
    cat = await memory.ingest("user:alice", "my cat is called Miso")
    await memory.ingest("user:alice", "the staging server runs Debian 12")
    await memory.ingest("user:mallory", "mallory's cat is called Rex")
    run = await app.create_run(USER, pb.CreateRunRequest(
        v=1, session_key="mem", input=pb.MessageInput(text="what is my cat called?"),
        complete=True, wait=True))
    assert run.run is not None and run.run.final_text == "noted"
    [request] = provider.requests
    system = [m.content for m in request.messages if m.role == "system"]
    assert len(system) == 1 and "<memory_context>" in system[0]
    assert "my cat is called Miso" in system[0] and "Rex" not in system[0]
    assert request.messages[-1].content == "what is my cat called?"
    stages = [m for m in harness.members(run.run.run_id) if isinstance(m, pb.ContextStage)]
    [stage] = stages
    assert stage.stage == "memory_auto_inject" and stage.item_ids[0] == cat.memory_id
    assert all(s >= 2000 for s in stage.scores_bps) and len(stage.item_ids) <= 3
    assert stage.tokens > 10 and "llama-2" in stage.tokenizer and stage.content == system[0]
    # Mallory asks the same: only her own memory can come back.
    other = await app.create_run(OTHER_USER, pb.CreateRunRequest(
        v=1, session_key="mem2", input=pb.MessageInput(text="what is my cat called?"),
        complete=True, wait=True))
    assert other.run is not None
    injected = [m for m in harness.members(other.run.run_id) if isinstance(m, pb.ContextStage)]
    assert [i for s in injected for i in s.item_ids] != [cat.memory_id]
    assert "Miso" not in "".join(s.content for s in injected)
    harness.check_tape(run.run.run_id)


async def test_nothing_relevant_writes_no_stage(harness: Harness) -> None:
    provider = PlannedProvider(lambda request: reply("ok"))
    harness.provider_factory = lambda: provider
    harness.context_factory = lambda store, gate: MemoryContext(Memory(store), gate)
    app = await harness.start()
    run = await app.create_run(USER, pb.CreateRunRequest(
        v=1, session_key="empty", input=pb.MessageInput(text="hello"), complete=True,
        wait=True))
    assert run.run is not None
    assert not any(isinstance(m, pb.ContextStage) for m in harness.members(run.run.run_id))
    assert all(m.role != "system" for m in provider.requests[0].messages)


async def test_unrelated_memory_is_not_injected(harness: Harness) -> None:
    # Scores are relative to the best candidate: with only unrelated items the best
    # of them still scores 2,500-2,800 bps. The absolute floor keeps them out.
    provider = PlannedProvider(lambda request: reply("ok"))
    harness.provider_factory = lambda: provider
    made: list[Memory] = []

    def context(store: JournalStore, gate: PolicyGate) -> MemoryContext:
        made.append(Memory(store))
        return MemoryContext(made[0], gate)

    harness.context_factory = context
    app = await harness.start()
    for text in ("my cat is called Miso", "the staging database lives on host db7",
                 "Alice's birthday is on March 3"):
        await made[0].ingest("user:alice", text)
    scored = await made[0].asearch("convert 5 miles to km", made[0].visible("user:alice", ""),
                                   limit=3)
    assert scored and scored[0][1].score_bps >= 2000  # what used to be injected
    run = await app.create_run(USER, pb.CreateRunRequest(
        v=1, session_key="unrelated", input=pb.MessageInput(text="convert 5 miles to km"),
        complete=True, wait=True))
    assert run.run is not None
    assert not any(isinstance(m, pb.ContextStage) for m in harness.members(run.run.run_id))
    assert all(m.role != "system" for m in provider.requests[0].messages)


async def test_a_new_run_sees_the_previous_runs_conversation(harness: Harness) -> None:
    from palyra.adapters import InputAssembly, RecentConversation

    provider = PlannedProvider(lambda request: reply(f"echo {request.messages[-1].content}"))
    harness.provider_factory = lambda: provider
    harness.context_factory = lambda store, gate: InputAssembly(
        [RecentConversation(store), MemoryContext(Memory(store), gate)])
    app = await harness.start()

    async def say(text: str, key: str = "chat") -> str:
        made = await app.create_run(USER, pb.CreateRunRequest(
            v=1, session_key=key, input=pb.MessageInput(text=text), complete=True, wait=True))
        assert made.run is not None
        return made.run.run_id

    first = await say("my name is Alice")
    assert all(m.role != "system" for m in provider.requests[-1].messages)
    second = await say("what did I just tell you?")
    [system] = [m.content for m in provider.requests[-1].messages if m.role == "system"]
    assert "<recent_conversation>" in system and "user: my name is Alice" in system
    assert "assistant: echo my name is Alice" in system
    [stage] = [m for m in harness.members(second) if isinstance(m, pb.ContextStage)]
    assert stage.stage == "recent_conversation" and first in stage.reason and stage.tokens > 5
    await say("third")  # only the previous run (the second) is carried
    [system] = [m.content for m in provider.requests[-1].messages if m.role == "system"]
    assert "what did I just tell you?" in system and "my name is Alice" not in system
    await say("hello", key="other-session")  # a fresh session has no previous run
    assert all(m.role != "system" for m in provider.requests[-1].messages)


async def test_references_are_resolved_through_their_tools_under_cedar(harness: Harness) -> None:
    from palyra.adapters import ContextReferences, InputAssembly
    from palyra.core.errors import ErrorCode, PalyraError

    provider = PlannedProvider(lambda request: reply("read them"))
    harness.provider_factory = lambda: provider
    memories: list[Memory] = []

    def assembly(store: JournalStore, gate: PolicyGate) -> InputAssembly:
        from palyra.adapters import GatePolicy, RegistryTools
        from palyra.tools import default_registry

        registry = default_registry()
        memories.append(Memory(store))
        return InputAssembly([ContextReferences(GatePolicy(gate, registry),
                                                RegistryTools(registry, harness.data_dir),
                                                memories[0], gate)])

    harness.context_factory = assembly
    app = await harness.start()
    (harness.data_dir / "notes.md").write_text("the launch is on Thursday\n")
    await memories[0].ingest("user:alice", "my cat is called Miso")
    text = ("compare @file:notes.md with (@file:.git/config), fetch @url:https://example.com "
            "and recall @memory:cat; mail bob@example.com")
    run = await app.create_run(USER, pb.CreateRunRequest(
        v=1, session_key="refs", input=pb.MessageInput(text=text), complete=True, wait=True))
    assert run.run is not None
    # http.fetch needs an approval: the run parks on it before the model is called
    # (tests/engine/test_reference_approvals.py); denied here, so nothing is fetched.
    assert run.run.state == pb.RunState.WAITING_FOR_APPROVAL and not provider.requests
    await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=run.run.pending_approval_id, decision=pb.ApprovalDecision.DENY))
    async with asyncio.timeout(5.0):
        while True:
            got = await app.get_run(USER, pb.GetRunRequest(run_id=run.run.run_id))
            if got.run.state == pb.RunState.DONE:
                break
            await asyncio.sleep(0.005)
    system = "\n".join(m.content for m in provider.requests[0].messages if m.role == "system")
    assert "the launch is on Thursday" in system  # fs.read, allowed (read-only)
    assert "[@file:.git/config] (not resolved: blocked" in system
    assert "[@url:https://example.com] (not resolved: http.fetch needs approval" in system
    assert "[@url:https://example.com] (not resolved: denied" in system
    assert "my cat is called Miso" in system  # memory.search, allowed
    [stage] = [m for m in harness.members(run.run.run_id) if isinstance(m, pb.ContextStage)]
    assert stage.stage == "context_references" and "@file:notes.md: resolved with fs.read" in (
        stage.reason)
    with pytest.raises(PalyraError) as info:  # refused before anything is journaled
        await app.create_run(USER, pb.CreateRunRequest(
            v=1, session_key="refs", input=pb.MessageInput(text="look at @file: please")))
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert info.value.details["column"] == "9"


async def test_preferences_are_always_in_the_input(harness: Harness,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from palyra.adapters import InputAssembly, Preferences
    from palyra.journal import EventDraft
    from palyra.memory import MemoryItem, Provenance, item_write

    provider = PlannedProvider(lambda request: reply("ok"))
    harness.provider_factory = lambda: provider
    memories: list[Memory] = []

    def assembly(store: JournalStore, gate: PolicyGate) -> InputAssembly:
        memories.append(Memory(store))
        return InputAssembly([MemoryContext(memories[0], gate, skip_kinds=("preference",)),
                              Preferences(memories[0], gate)])

    harness.context_factory = assembly
    app = await harness.start()
    assert harness.store is not None
    pref = MemoryItem(memory_id="mempref", kind="preference", text="prefers metric units",
                      scope="principal", owner="user:alice", created_ms=1,
                      provenance=Provenance(session_id="s", run_id="r", tape_seqs=[2],
                                            positions=[3], sha256="0" * 64, source="learning:x"))
    await harness.store.append([EventDraft(kind="learning.accepted", actor="user:alice",
                                           entity_writes=(item_write(pref),))])
    run = await app.create_run(USER, pb.CreateRunRequest(
        v=1, session_key="p", input=pb.MessageInput(text="how far is it to Brno?"),
        complete=True, wait=True))
    assert run.run is not None
    system = [m.content for m in provider.requests[0].messages if m.role == "system"]
    assert system == [system[0]] and "<preferences>" in system[0]  # once, not twice
    assert "prefers metric units" in system[0]
    stages = [m.stage for m in harness.members(run.run.run_id) if isinstance(m, pb.ContextStage)]
    assert stages == ["preferences"]
    import palyra.adapters.context as context

    checks: list[str] = []
    check = context.memory_search_allowed

    def counting(gate: PolicyGate, request: context.ContextRequest) -> tuple[bool, str]:
        checks.append(request.identity.principal)
        return check(gate, request)

    monkeypatch.setattr(context, "memory_search_allowed", counting)
    other = await app.create_run(OTHER_USER, pb.CreateRunRequest(
        v=1, session_key="q", input=pb.MessageInput(text="how far?"), complete=True, wait=True))
    assert other.run is not None
    assert not any(isinstance(m, pb.ContextStage) for m in harness.members(other.run.run_id))
    # A principal with no memory items: one Cedar check for the input (MemoryContext's,
    # which says so on the tape if denied), none for preferences it cannot have.
    assert checks == [OTHER_USER.identity.principal]
