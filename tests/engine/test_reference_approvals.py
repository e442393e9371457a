"""A context reference whose tool needs an approval parks the run like a tool call.

The daemon proposes the call itself (``ToolProposal.context_reference``), in the same
append as the input that named it; the run waits for the decision, durably; only then
is the model called, with the reference's content (or why it is missing) as a context
block of its own, never as a tool message the model did not ask for.
"""

from __future__ import annotations

import asyncio

from engine_harness import ADMIN, USER, Harness, next_approval
from palyra_gen.palyra import v1 as pb
from planned_provider import PlannedProvider, reply

from palyra.engine.model.fold import LoopState
from palyra.journal import JournalStore
from palyra.policy import PolicyGate, Posture

NOTE = "the launch moved to Friday\n"


def _setup(harness: Harness) -> PlannedProvider:
    from palyra.adapters import ContextReferences, GatePolicy, InputAssembly, RegistryTools
    from palyra.memory.service import Memory
    from palyra.tools import default_registry

    provider = PlannedProvider(lambda request: reply("read it"))
    harness.provider_factory = lambda: provider

    def assembly(store: JournalStore, gate: PolicyGate) -> InputAssembly:
        registry = default_registry()
        return InputAssembly([ContextReferences(GatePolicy(gate, registry),
                                                RegistryTools(registry, harness.data_dir),
                                                Memory(store), gate)])

    harness.context_factory = assembly
    return provider


async def _ask_posture(app: object, key: str) -> None:
    resolved = await app.resolve_session(  # type: ignore[attr-defined]
        USER, pb.ResolveSessionRequest(session_key=key))
    await app.set_tool_posture(USER, pb.SetToolPostureRequest(  # type: ignore[attr-defined]
        session_id=resolved.session.session_id, tool_name="fs.read",
        posture=pb.ToolPosture.ASK_EACH_TIME))


async def _start(app: object, text: str, key: str) -> str:
    created = await app.create_run(USER, pb.CreateRunRequest(  # type: ignore[attr-defined]
        v=1, session_key=key, input=pb.MessageInput(text=text), complete=True))
    return str(created.run.run_id)


async def _wait_done(app: object, run_id: str) -> pb.Run:
    async with asyncio.timeout(5.0):
        while True:
            run = (await app.get_run(  # type: ignore[attr-defined]
                USER, pb.GetRunRequest(run_id=run_id))).run
            if run.state in (pb.RunState.DONE, pb.RunState.FAILED, pb.RunState.CANCELLED):
                return run
            await asyncio.sleep(0.005)


def _system(provider: PlannedProvider) -> str:
    return "\n".join(m.content for m in provider.requests[0].messages if m.role == "system")


async def test_an_approved_reference_is_read_after_the_approval(harness: Harness) -> None:
    provider = _setup(harness)
    app = await harness.start()
    (harness.data_dir / "notes.md").write_text(NOTE)
    await _ask_posture(app, "refs")
    run_id = await _start(app, "what does @file:notes.md say?", "refs")
    approval = await next_approval(app, run_id)
    assert approval.tool_name == "fs.read" and not provider.requests  # parked before the model
    await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=approval.approval_id, decision=pb.ApprovalDecision.APPROVE))
    run = await _wait_done(app, run_id)
    assert run.state == pb.RunState.DONE
    system = _system(provider)
    assert "[@file:notes.md] (read with fs.read after approval)" in system
    assert "the launch moved to Friday" in system
    # The model sees the reference as context, not as a tool call it never made.
    assert all(m.role != "tool" and not m.tool_calls for m in provider.requests[0].messages)
    [proposal] = [m for m in harness.members(run_id) if isinstance(m, pb.ToolProposal)]
    assert proposal.context_reference == "@file:notes.md" and proposal.approval_required
    assert proposal.decision.outcome == pb.ToolDecisionOutcome.NEEDS_APPROVAL
    harness.check_tape(run_id)
    # The tape folds back to the same conversation, each message knowing its seq
    # (what compaction plans over): the reference's result is a block, not a message.
    state = LoopState()
    for member in harness.members(run_id):
        state.apply(member)
    assert len(state.messages) == len(state.message_seqs)
    assert [m.role for m in state.messages] == ["user", "assistant"]
    assert any("the launch moved to Friday" in b for b in state.context_blocks)


async def test_a_denied_reference_tells_the_model_why(harness: Harness) -> None:
    provider = _setup(harness)
    app = await harness.start()
    (harness.data_dir / "notes.md").write_text(NOTE)
    await _ask_posture(app, "deny")
    run_id = await _start(app, "summarise @file:notes.md", "deny")
    approval = await next_approval(app, run_id)
    await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=approval.approval_id, decision=pb.ApprovalDecision.DENY))
    run = await _wait_done(app, run_id)
    assert run.state == pb.RunState.DONE
    system = _system(provider)
    assert "[@file:notes.md] (not resolved: denied" in system
    assert "the launch moved to Friday" not in system


async def test_a_parked_reference_survives_a_restart(harness: Harness) -> None:
    provider = _setup(harness)
    app = await harness.start()
    (harness.data_dir / "notes.md").write_text(NOTE)
    await _ask_posture(app, "restart")
    run_id = await _start(app, "check @file:notes.md", "restart")
    first = await next_approval(app, run_id)
    app = await harness.restart()
    again = await next_approval(app, run_id)
    assert again.approval_id == first.approval_id  # the same durable approval, not a new one
    await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=again.approval_id, decision=pb.ApprovalDecision.APPROVE))
    assert (await _wait_done(app, run_id)).state == pb.RunState.DONE
    assert "the launch moved to Friday" in _system(provider)
    assert len(provider.requests) == 1


async def test_an_allowed_posture_reads_at_once(harness: Harness) -> None:
    # Control: without the ask posture the same reference is read in assembly.
    harness.policy_config = harness.policy_config.__class__(
        tool_postures={"fs.read": Posture.ALWAYS_ALLOW})
    provider = _setup(harness)
    app = await harness.start()
    (harness.data_dir / "notes.md").write_text(NOTE)
    run_id = await _start(app, "check @file:notes.md", "allowed")
    assert (await _wait_done(app, run_id)).state == pb.RunState.DONE
    assert "the launch moved to Friday" in _system(provider)
    assert not [m for m in harness.members(run_id) if isinstance(m, pb.ToolProposal)]
