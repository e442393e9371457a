"""agent.delegate: a child run of another agent, its answer as the tool result, the tree in
GetRun, a budget slice, depth and fan-out bounds, a restart while the child works, cancel."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from engine_harness import ADMIN, USER, Harness, fast_config, loop_text, run_to_end, slow_add
from palyra_gen.palyra import v1 as pb

from palyra.app import PalyraApp
from palyra.engine import IdentityRec
from palyra.policy import PolicyConfig

ALICE = IdentityRec(principal="user:alice")


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
    harness.delegation = True
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
    harness.delegation = True
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
    harness.delegation = True
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
    harness.delegation = True
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
    harness.delegation = True
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
    harness.delegation = True
    harness.policy_config = PolicyConfig(config_dir=tmp_path / "config")
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
