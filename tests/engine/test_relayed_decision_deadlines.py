"""A relayed approval decision lands only while its decider waits, on two engines.

A decision taken on a daemon without the run is relayed to the owner through a row;
its decider waits 2 x TTL + 5 s and is then told ``UNAVAILABLE`` (retryable). The
owner's commit of the decision and the decider's give-up are each a compare-and-set
on that row, so a decider told ``UNAVAILABLE`` is never overruled by its own decision
landing later, and an owner ignores a row past its deadline (a decider that died
cannot give up).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest
from engine_harness import ADMIN, USER, Harness, loop_text, next_approval
from lease_daemons import started, until
from palyra_gen.palyra import v1 as pb

from palyra.app import PalyraApp
from palyra.core.errors import ErrorCode, PalyraError
from palyra.engine.model.approvals import Decision
from palyra.engine.model.lifecycle import ApprovalEvent
from palyra.engine.run import relay

APPROVE = pb.ApprovalDecision.APPROVE


async def _hitl_run(app: PalyraApp) -> pb.Run:
    """A run asking approval for its one step."""
    resolved = await app.resolve_session(USER, pb.ResolveSessionRequest(session_key="hitl"))
    await app.set_tool_posture(USER, pb.SetToolPostureRequest(
        session_id=resolved.session.session_id, tool_name="add",
        posture=pb.ToolPosture.ASK_EACH_TIME))
    return (await app.create_run(USER, pb.CreateRunRequest(
        session_key="hitl", input=pb.MessageInput(text=loop_text(1)), complete=True))).run


def _decide(app: PalyraApp, approval_id: str, reason: str) -> asyncio.Future[pb.DecideApprovalResponse]:
    return asyncio.ensure_future(app.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=approval_id, decision=APPROVE, scope=pb.ApprovalScope.ONCE, reason=reason)))


async def _approval(app: PalyraApp, approval_id: str) -> pb.Approval:
    return (await app.get_approval(ADMIN, pb.GetApprovalRequest(approval_id=approval_id))).approval


async def test_a_decision_whose_decider_gave_up_never_lands(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    # A short lease: B gives up after 2 x 1 + 5 s.
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=1)
    _, app_b = await started(daemons, tmp_path, dsn, ttl_s=1)
    assert a.engine is not None and a.store is not None
    run = await _hitl_run(app_a)
    asked = await next_approval(app_a, run.run_id)
    actor = a.engine._actors[run.run_id]  # to stall A's commit of the decision
    waiting = actor._step.mailbox.expect(asked.approval_id)
    async with actor._writer.lock:  # A reads the relayed row, then waits for this lock
        deciding = _decide(app_b, asked.approval_id, "from b")
        await until(waiting.done)  # A took the relayed decision up
        with pytest.raises(PalyraError) as gave_up:
            await deciding
        assert gave_up.value.code is ErrorCode.UNAVAILABLE
    # A's commit finds the row withdrawn: nothing of the decision lands, the run waits.
    await asyncio.sleep(0.5)
    assert (await _approval(app_a, asked.approval_id)).state == pb.ApprovalState.PENDING
    assert a.store.scan_entities("meta", "approval_relay:", "", 10) == []
    decided = (await asyncio.wait_for(_decide(app_a, asked.approval_id, "from a"), 5)).approval
    assert decided.state == pb.ApprovalState.APPROVED and decided.reason == "from a"
    await until(lambda: a.kinds(run.run_id).count("status:DONE") == 1)
    assert a.kinds(run.run_id).count("tool_approval_response") == 1
    a.check_tape(run.run_id)


async def test_an_owner_ignores_a_relayed_decision_past_its_deadline(
    daemons: list[Harness], tmp_path: Path, dsn: str
) -> None:
    # The decider died before giving up: its row stays, past its deadline.
    a, app_a = await started(daemons, tmp_path, dsn, ttl_s=60)
    assert a.engine is not None and a.store is not None
    run = await _hitl_run(app_a)
    asked = await next_approval(app_a, run.run_id)
    record = a.engine.approval_reader.get(asked.approval_id)
    assert record is not None
    now = a.engine._deps.now_ms()
    late = Decision(ApprovalEvent.APPROVE, "once", 0, "from a dead decider", "user:b", now)
    await a.store.append([relay.relay_draft(record, late, now - 1)])
    await asyncio.sleep(4 * relay.RELAY_POLL_S)  # A looked at the row, more than once
    assert (await _approval(app_a, asked.approval_id)).state == pb.ApprovalState.PENDING
    raw = a.store.get_entity("meta", relay.relay_key(asked.approval_id))
    assert raw is not None and msgspec.json.decode(
        raw, type=relay.RelayedDecision).reason == "from a dead decider"
    decided = (await asyncio.wait_for(_decide(app_a, asked.approval_id, "from a"), 5)).approval
    assert decided.reason == "from a"
    await until(lambda: a.kinds(run.run_id).count("status:DONE") == 1)
    assert a.store.scan_entities("meta", "approval_relay:", "", 10) == []  # cleared with it
