"""Post-run reflection end to end: a run ends done, a reflection task runs on the scripted
model, candidates obey the thresholds, the applied one is a memory item whose provenance
matches the journal, and review is Cedar-gated and records who decided."""

from __future__ import annotations

import asyncio
import hashlib
import time

import msgspec
import pytest
from engine_harness import ADMIN, OTHER_USER, USER, Harness
from palyra_gen.palyra import v1 as pb
from planned_provider import PlannedProvider

from palyra.core.canonical import canonical_bytes
from palyra.core.errors import ErrorCode, PalyraError
from palyra.learning import TASK_KIND, Learning, LearningConfig
from palyra.memory import get_item
from palyra.providers import ProviderConfig, ProviderRegistry, scripted_reply
from palyra.providers._scripted import REFLECTION_MARKER
from palyra.tasks import State, TaskContext, TaskQueue, TaskWorker

TEXT = ("Please remember that my cat is called Miso. I prefer metric units. Start from 0 and "
        "add 1 to the running total 3 times, one `add` tool call per step, then reply with "
        "the final result.")


async def _setup(harness: Harness, config: LearningConfig | None = None
                 ) -> tuple[TaskQueue, TaskWorker, Learning]:
    app = await harness.start()
    assert harness.engine is not None and harness.store is not None
    queue = TaskQueue(harness.store)
    await queue.start()
    learning = Learning(harness.store, harness.engine.provider, config or LearningConfig())

    async def on_end(record):  # type: ignore[no-untyped-def]
        await learning.on_run_end(record, queue)

    harness.engine.on_run_end(on_end)
    worker = TaskWorker(queue, {TASK_KIND: learning.reflect})
    worker.start()
    app.learning = learning
    return queue, worker, learning


async def _run(harness: Harness, text: str = TEXT, key: str = "learn") -> str:
    assert harness.app is not None
    created = await harness.app.create_run(USER, pb.CreateRunRequest(
        v=1, session_key=key, input=pb.MessageInput(text=text), complete=True, wait=True))
    assert created.run is not None and created.run.final_text == "result=3"
    return created.run.run_id


async def _reflected(queue: TaskQueue, run_id: str) -> None:
    async with asyncio.timeout(5):
        while True:
            tasks = [t for t in queue.page(kind=TASK_KIND, limit=100)[0]
                     if f'"{run_id}"' in t.payload_json]
            if tasks and tasks[0].state == State.SUCCEEDED:
                return
            await asyncio.sleep(0.01)


async def test_reflection_yields_candidates_and_applies_by_threshold(harness: Harness) -> None:
    queue, worker, _learning = await _setup(harness)
    try:
        run_id = await _run(harness)
        await _reflected(queue, run_id)
        app, store = harness.app, harness.store
        assert app is not None and store is not None
        listed = await app.list_candidates(USER, pb.ListCandidatesRequest(run_id=run_id))
        by_kind = {c.kind: c for c in listed.candidates}
        assert set(by_kind) == {"durable_fact", "preference", "procedure"}
        fact, pref, proc = by_kind["durable_fact"], by_kind["preference"], by_kind["procedure"]
        assert (fact.text, fact.confidence_bps, fact.state) == (
            "my cat is called Miso", 9200, pb.LearningCandidateState.APPLIED)
        assert (pref.text, pref.state) == ("prefers metric units",
                                           pb.LearningCandidateState.PENDING_REVIEW)
        assert proc.text == "tool sequence add -> add (seen 2 times)"
        assert proc.state == pb.LearningCandidateState.PENDING_REVIEW
        # Provenance: the item points at the user's input event, and its digest is
        # recomputable from the journal's stored payload.
        item = get_item(store, fact.memory_id)
        assert item is not None and item.text == fact.text and item.owner == "user:alice"
        [position] = item.provenance.positions
        [source] = store.read_range(position - 1, 1)
        assert source.kind == "tape.user_input" and source.tape_seq == fact.tape_seqs[0]
        assert item.provenance.sha256 == hashlib.sha256(
            canonical_bytes(source.payload)).hexdigest() == fact.source_sha256
        assert get_item(store, pref.memory_id or "none") is None  # pending: not remembered
        # Someone else's run: invisible, and not theirs to review.
        other = await app.list_candidates(OTHER_USER, pb.ListCandidatesRequest(run_id=run_id))
        assert other.candidates == []
        with pytest.raises(PalyraError) as info:
            await app.accept_candidate(OTHER_USER, pb.AcceptCandidateRequest(
                candidate_id=pref.candidate_id))
        assert info.value.code is ErrorCode.PERMISSION_DENIED
        accepted = await app.accept_candidate(USER, pb.AcceptCandidateRequest(
            candidate_id=pref.candidate_id, reason="yes"))
        assert accepted.candidate is not None
        assert accepted.candidate.state == pb.LearningCandidateState.ACCEPTED
        assert accepted.candidate.decided_by == "user:alice"
        remembered = get_item(store, accepted.candidate.memory_id)
        assert remembered is not None and remembered.text == "prefers metric units"
        rejected = await app.reject_candidate(ADMIN, pb.RejectCandidateRequest(
            candidate_id=proc.candidate_id, reason="noise"))
        assert rejected.candidate is not None and rejected.candidate.decided_by == "admin:ops"
        with pytest.raises(PalyraError) as again:
            await app.reject_candidate(ADMIN, pb.RejectCandidateRequest(
                candidate_id=pref.candidate_id))
        assert again.value.code is ErrorCode.CANDIDATE_ALREADY_DECIDED
        kinds = [e.kind for e in store.read_range(0, 100_000) if e.kind.startswith("learning.")]
        assert kinds.count("learning.candidate") == 3
        assert "learning.accepted" in kinds and "learning.rejected" in kinds
    finally:
        await worker.close()
        await queue.close()


async def test_reflecting_twice_writes_nothing_new_and_cooldown_and_sampling_hold(
        harness: Harness) -> None:
    queue, worker, learning = await _setup(harness)
    try:
        run_id = await _run(harness)
        await _reflected(queue, run_id)
        store = harness.store
        assert store is not None
        before = store.head().count
        [task] = queue.page(kind=TASK_KIND)[0]
        again = await learning.reflect(TaskContext(task, msgspec.json.decode(task.payload_json)))
        assert again == {"candidates": 0, "applied": 0} and store.head().count == before
        await _run(harness)  # same session, inside the cooldown: no second reflection
        await asyncio.sleep(0.05)
        assert len(queue.page(kind=TASK_KIND)[0]) == 1
    finally:
        await worker.close()
        await queue.close()


async def test_sampling_zero_reflects_on_nothing(harness: Harness) -> None:
    queue, worker, _learning = await _setup(harness, LearningConfig(sampling_percent=0))
    try:
        await _run(harness)
        await asyncio.sleep(0.05)
        assert queue.page(kind=TASK_KIND)[0] == []
    finally:
        await worker.close()
        await queue.close()


async def test_the_cooldown_is_per_session_and_survives_a_restart(harness: Harness) -> None:
    clock = [time.time_ns() // 1_000_000]  # the queue stamps tasks with the wall clock
    queue, worker, learning = await _setup(harness)
    learning._now = lambda: clock[0]  # a fake clock for the cooldown only
    try:
        await _run(harness, key="a")
        await _run(harness, key="b")  # another session: not held back
        clock[0] += 299_000
        await _run(harness, key="a")  # inside a's 5 min cooldown
        assert len(queue.page(kind=TASK_KIND)[0]) == 2
        fresh = Learning(harness.store, harness.engine.provider, LearningConfig(),  # type: ignore[arg-type, union-attr]
                         now_ms=lambda: clock[0])
        record = harness.engine.get_run(ADMIN.identity, (await _run_id(harness, "a")))  # type: ignore[union-attr, arg-type]
        assert await fresh.on_run_end(record, queue) is None  # remembered from the table
        clock[0] += 2_000
        assert await fresh.on_run_end(record, queue) is not None  # 5 min passed
    finally:
        await worker.close()
        await queue.close()


async def _run_id(harness: Harness, key: str) -> str:
    assert harness.app is not None
    return await _run(harness, key=key)


async def test_the_same_proposal_is_not_made_twice_across_runs(harness: Harness) -> None:
    queue, worker, _learning = await _setup(harness)
    try:
        first = await _run(harness, key="first")
        await _reflected(queue, first)
        second = await _run(harness, key="second")  # another session: reflected too
        await _reflected(queue, second)
        app = harness.app
        assert app is not None
        made = (await app.list_candidates(USER, pb.ListCandidatesRequest(run_id=first))).candidates
        again = (await app.list_candidates(USER, pb.ListCandidatesRequest(
            run_id=second))).candidates
        assert {c.text for c in made} >= {"prefers metric units"}
        assert again == []  # the same facts, preference and procedure: nothing new
    finally:
        await worker.close()
        await queue.close()


async def test_a_reflection_asks_the_runs_own_provider(harness: Harness) -> None:
    """A run served by an agent with its own provider is reflected on by that provider,
    not the daemon's default one."""
    default, own = PlannedProvider(scripted_reply), PlannedProvider(scripted_reply)
    harness.models_factory = lambda: ProviderRegistry(
        [(ProviderConfig(name="main"), default), (ProviderConfig(name="own"), own)])
    app = await harness.start()
    assert harness.engine is not None and harness.store is not None
    queue = TaskQueue(harness.store)
    await queue.start()
    learning = Learning(harness.store, harness.engine.provider, LearningConfig(),
                        models=harness.engine.models)

    async def on_end(record):  # type: ignore[no-untyped-def]
        await learning.on_run_end(record, queue)

    harness.engine.on_run_end(on_end)
    worker = TaskWorker(queue, {TASK_KIND: learning.reflect})
    worker.start()
    try:
        agent = (await app.create_agent(ADMIN, pb.CreateAgentRequest(agent=pb.Agent(
            display_name="reflective", provider="own")))).agent
        assert agent is not None
        created = await app.create_run(USER, pb.CreateRunRequest(
            v=1, session_key="own", input=pb.MessageInput(text=TEXT), complete=True, wait=True,
            agent_id=agent.agent_id))
        await _reflected(queue, created.run.run_id)
        asked = [r.messages[0].content for r in own.requests if r.messages]
        assert any(text.startswith(REFLECTION_MARKER) for text in asked)
        assert default.requests == []
    finally:
        await worker.close()
        await queue.close()
