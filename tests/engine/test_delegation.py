"""agent.delegate: a child run of another agent, its answer as the tool result, the tree in
GetRun, a budget slice, depth and fan-out bounds, a restart while the child works, cancel."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine_harness import (
    ADMIN,
    USER,
    Harness,
    fast_config,
    loop_text,
    next_approval,
    run_to_end,
    slow_add,
)
from palyra_gen.palyra import v1 as pb

from palyra.app import PalyraApp
from palyra.core.errors import PalyraError
from palyra.engine import IdentityRec
from palyra.journal import EventDraft, StoredEvent
from palyra.policy import PolicyConfig, Posture

ALICE = IdentityRec(principal="user:alice")


def trust_delegation(harness: Harness) -> None:
    """Register agent.delegate and let its calls run unasked (an operator's config)."""
    harness.delegation = True
    harness.policy_config = PolicyConfig(tool_postures={"agent.delegate": Posture.ALWAYS_ALLOW})


def delegate(agent_id: str, task: str, **more: object) -> str:
    return "/call agent.delegate " + json.dumps({"agent_id": agent_id, "task": task, **more})


async def helper(harness: Harness) -> str:
    assert harness.app is not None
    made = (await harness.app.create_agent(ADMIN, pb.CreateAgentRequest(agent=pb.Agent(
        display_name="helper")))).agent
    assert made is not None
    return made.agent_id


async def started_children(app: PalyraApp, run_id: str) -> list[str]:
    """The run's children once it has one (polls for up to 10 s)."""
    for _ in range(200):
        children = (await app.get_run(USER, pb.GetRunRequest(run_id=run_id))).run.child_run_ids
        if children:
            return children
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} started no child")


def results(harness: Harness, run_id: str) -> list[pb.ToolResult]:
    return [m for m in harness.members(run_id) if isinstance(m, pb.ToolResult)]


async def test_a_child_run_answers_the_parent(harness: Harness) -> None:
    trust_delegation(harness)
    app = await harness.start()
    agent_id = await helper(harness)
    parent = await run_to_end(app, delegate(agent_id, "hello from the child"))
    assert parent.state == pb.RunState.DONE
    [result] = results(harness, parent.run_id)
    assert result.success
    output = json.loads(result.output_json)
    assert output["text"] == "hello from the child"
    assert output["text"] in parent.final_text
    tree = (await app.get_run(USER, pb.GetRunRequest(run_id=parent.run_id))).run
    assert tree.child_run_ids == [output["child_run_id"]]
    child = (await app.get_run(USER, pb.GetRunRequest(run_id=output["child_run_id"]))).run
    assert (child.parent_run_id, child.delegation_depth, child.agent_id) == (
        parent.run_id, 1, agent_id)
    assert child.identity is not None and child.identity.principal == "user:alice"
    [task] = [m.text for m in harness.members(child.run_id) if isinstance(m, pb.UserInput)]
    assert task == "hello from the child"
    # The child's tape names its parent from its first event.
    accepted = harness.members(child.run_id)[0]
    assert isinstance(accepted, pb.RunStatus)
    assert accepted.message.endswith(f"parent_run={parent.run_id}")


async def test_the_childs_budget_slice_and_the_depth_bound(harness: Harness) -> None:
    trust_delegation(harness)
    harness.config = fast_config(delegation_max_depth=1)
    app = await harness.start()
    agent_id = await helper(harness)
    # A slice of 1 token: the child's second model call finds it spent.
    parent = await run_to_end(app, delegate(agent_id, loop_text(2), max_tokens=1))
    [result] = results(harness, parent.run_id)
    assert not result.success and "budget exhausted" in result.error
    [child_id] = (await app.get_run(USER, pb.GetRunRequest(run_id=parent.run_id))).run \
        .child_run_ids
    child = (await app.get_run(USER, pb.GetRunRequest(run_id=child_id))).run
    assert child.end_reason == "budget_exhausted"
    # A child may not delegate further than the configured depth.
    nested = await run_to_end(app, delegate(agent_id, delegate(agent_id, "too deep")))
    [outer] = results(harness, nested.run_id)
    assert outer.success
    assert "delegation depth 2 is over the limit of 1" in json.loads(outer.output_json)["text"]


async def test_fan_out_is_bounded(harness: Harness) -> None:
    trust_delegation(harness)
    harness.config = fast_config(delegation_max_children=2)
    app = await harness.start()
    agent_id = await helper(harness)
    calls = "\n".join(delegate(agent_id, f"task {i}") for i in range(3))
    parent = await run_to_end(app, calls)
    outcomes = [r.success for r in results(harness, parent.run_id)]
    assert sorted(outcomes) == [False, True, True]
    assert len((await app.get_run(USER, pb.GetRunRequest(run_id=parent.run_id))).run
               .child_run_ids) == 2


async def test_a_restart_while_the_child_works_resumes_both(harness: Harness) -> None:
    trust_delegation(harness)
    harness.tool = slow_add(1.0)
    app = await harness.start()
    agent_id = await helper(harness)
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text=delegate(agent_id, loop_text(1))), complete=True))
    parent_id = created.run.run_id
    children = await started_children(app, parent_id)
    await asyncio.sleep(0.3)  # the child is in its slow tool call
    app = await harness.restart()
    assert harness.engine is not None
    async with asyncio.timeout(20):
        parent = await harness.engine.wait_run(ALICE, parent_id, until_terminal=True)
    assert parent.state == "done"
    assert "result=1" in parent.final_text
    after = (await app.get_run(USER, pb.GetRunRequest(run_id=parent_id))).run
    assert after.child_run_ids == children  # the same child, not a second one


async def test_cancelling_the_parent_cancels_the_child(harness: Harness) -> None:
    trust_delegation(harness)
    harness.tool = slow_add(5.0)
    app = await harness.start()
    agent_id = await helper(harness)
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text=delegate(agent_id, loop_text(1))), complete=True))
    parent_id = created.run.run_id
    children = await started_children(app, parent_id)
    await app.abort_run(USER, pb.AbortRunRequest(run_id=parent_id))
    for _ in range(100):
        child = (await app.get_run(USER, pb.GetRunRequest(run_id=children[0]))).run
        if child.state == pb.RunState.CANCELLED:
            break
        await asyncio.sleep(0.05)
    assert child.state == pb.RunState.CANCELLED


async def test_cedar_agent_delegate_can_forbid_a_target(harness: Harness, tmp_path: Path) -> None:
    policies = tmp_path / "config" / "policies"
    policies.mkdir(parents=True)
    trust_delegation(harness)
    harness.policy_config = dataclasses.replace(harness.policy_config,
                                                config_dir=tmp_path / "config")
    app = await harness.start()
    agent_id = await helper(harness)
    await harness.stop()
    (policies / "no_helper.cedar").write_text(
        f'forbid (principal, action == Action::"agent.delegate", resource == Agent::"{agent_id}")'
        ' unless { context.principal_name like "admin:*" };\n')
    app = await harness.start()
    parent = await run_to_end(app, delegate(agent_id, "hi"))
    [result] = results(harness, parent.run_id)
    assert not result.success and "may not delegate to agent" in result.error
    assert (await app.get_run(USER, pb.GetRunRequest(run_id=parent.run_id))).run \
        .child_run_ids == []
    allowed = await run_to_end(app, delegate(agent_id, "hi"), ADMIN)
    assert results(harness, allowed.run_id)[0].success


async def test_a_cancel_ends_the_whole_delegation_tree_in_its_own_append(
        harness: Harness) -> None:
    """The parent's cancel, its child's and its grandchild's are one journal append."""
    trust_delegation(harness)
    harness.tool = slow_add(5.0)
    app = await harness.start()
    assert harness.store is not None
    agent_id = await helper(harness)
    appends: list[list[EventDraft]] = []
    submit = harness.store.submit

    def recording(drafts: Sequence[EventDraft], **kw: Any) -> asyncio.Future[list[StoredEvent]]:
        appends.append(list(drafts))
        return submit(drafts, **kw)

    harness.store.submit = recording  # type: ignore[method-assign]
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text=delegate(agent_id, delegate(agent_id, loop_text(1)))),
        complete=True))
    parent_id = created.run.run_id
    [child_id] = await started_children(app, parent_id)
    [grandchild_id] = await started_children(app, child_id)
    await asyncio.sleep(0.2)  # the grandchild is in its slow tool call
    await app.abort_run(USER, pb.AbortRunRequest(run_id=parent_id))
    ended = [{d.run_id for d in drafts if d.kind == "tape.status"
              and isinstance(d.origin, pb.RunStatus) and d.origin.state == pb.RunState.CANCELLED}
             for drafts in appends]
    [together] = [runs for runs in ended if runs]
    assert together == {parent_id, child_id, grandchild_id}
    for run_id in (child_id, grandchild_id):
        run = (await app.get_run(USER, pb.GetRunRequest(run_id=run_id))).run
        assert (run.state, run.end_reason) == (pb.RunState.CANCELLED, "parent_cancelled")
        assert harness.check_tape(run_id)[-1] == "cancelled"
        [status] = [m for m in harness.members(run_id)
                    if isinstance(m, pb.RunStatus) and m.state == pb.RunState.CANCELLED]
        assert status.message == f"cancelled: delegated under run {parent_id}, which cancelled"
    # After a restart nothing runs again: the journal holds all three ends.
    app = await harness.restart()
    for run_id in (parent_id, child_id, grandchild_id):
        assert (await app.get_run(USER, pb.GetRunRequest(run_id=run_id))).run.state == \
            pb.RunState.CANCELLED


async def test_by_default_each_delegation_asks(harness: Harness) -> None:
    """A child run spends the principal's budget and reaches another agent's tools: the
    call is sensitive, so with no posture set it waits for an approval first."""
    harness.delegation = True
    app = await harness.start()
    agent_id = await helper(harness)
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text=delegate(agent_id, "hi")), complete=True))
    run_id = created.run.run_id
    approval = await next_approval(app, run_id)
    assert approval.tool_name == "agent.delegate"
    assert (await app.get_run(USER, pb.GetRunRequest(run_id=run_id))).run.child_run_ids == []
    await app.decide_approval(ADMIN, pb.DecideApprovalRequest(
        approval_id=approval.approval_id, decision=pb.ApprovalDecision.APPROVE))
    assert harness.engine is not None
    async with asyncio.timeout(10):
        done = await harness.engine.wait_run(ALICE, run_id, until_terminal=True)
    assert done.state == "done" and "hi" in done.final_text


async def test_a_failing_parent_ends_its_child_in_its_own_append(harness: Harness) -> None:
    trust_delegation(harness)
    harness.tool = slow_add(5.0)
    app = await harness.start()
    assert harness.store is not None and harness.engine is not None
    agent_id = await helper(harness)
    appends: list[list[EventDraft]] = []
    submit = harness.store.submit

    def recording(drafts: Sequence[EventDraft], **kw: Any) -> asyncio.Future[list[StoredEvent]]:
        appends.append(list(drafts))
        return submit(drafts, **kw)

    harness.store.submit = recording  # type: ignore[method-assign]
    created = await app.create_run(USER, pb.CreateRunRequest(
        input=pb.MessageInput(text=delegate(agent_id, loop_text(1))), complete=True))
    parent_id = created.run.run_id
    [child_id] = await started_children(app, parent_id)
    await asyncio.sleep(0.2)
    harness.engine.fail_run(parent_id, PalyraError("the stream broke"), "stream_broken")
    async with asyncio.timeout(5):
        parent = await harness.engine.wait_run(ALICE, parent_id, until_terminal=True)
    assert parent.state == "failed"
    [ending] = [drafts for drafts in appends
                if any(d.kind == "tape.status" and d.run_id == parent_id
                       and isinstance(d.origin, pb.RunStatus)
                       and d.origin.state == pb.RunState.FAILED for d in drafts)]
    [status] = [d.origin for d in ending if d.kind == "tape.status" and d.run_id == child_id]
    assert isinstance(status, pb.RunStatus)
    assert (status.state, status.reason) == (pb.RunState.CANCELLED, "parent_failed")
    child = (await app.get_run(USER, pb.GetRunRequest(run_id=child_id))).run
    assert (child.state, child.end_reason) == (pb.RunState.CANCELLED, "parent_failed")
