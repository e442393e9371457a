"""``agent.delegate``: a run hands a task to another agent as a child run and waits for it.

The child runs as the same principal under its own agent (tools, postures, model
route), with a slice of the parent's token budget, and its final text is the
tool's result. Durability comes from idempotence: the child's run id is derived
from the parent run and the exact call, so the call made again (a restart
re-runs the in-flight call, which is why the tool is declared idempotent)
finds the child it started, recovered like any run, and waits on
it. The child's first commit holds an index row
(``Engine.child_index_write``) that bounds the fan-out and lets ``GetRun``
list the tree. A cancelled parent cancels its waiting child.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib

import msgspec

from palyra.agents import AgentRegistry
from palyra.agents.model import postures_for, route_for
from palyra.core.capabilities import Capability
from palyra.core.errors import ErrorCode, PalyraError
from palyra.engine import (
    Engine,
    IdentityRec,
    KeyedLocks,
    RunRecord,
    RunStateId,
    Selectors,
    StartRun,
)
from palyra.policy import PolicyGate
from palyra.tools import ToolContext, ToolOutput, ToolSpec

TOOL_NAME = "agent.delegate"
_SYSTEM = IdentityRec(principal="system:delegation")
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


class DelegateArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Arguments of ``agent.delegate``.

    Attributes:
        agent_id: The agent that takes the task.
        task: What it is asked (the child run's first input).
        max_tokens: Tokens (input + output) the child may use; 0: the parent's
            remaining slice, if it has one, else no cap of its own.
    """

    agent_id: str
    task: str
    max_tokens: int = 0


def child_run_id(parent_run_id: str, args: DelegateArgs) -> str:
    """The child's ULID: the parent's time part, then 80 bits of the call's digest.

    The same call of the same run always names the same child, so a call made
    again after a restart finds the child instead of starting a second one.
    """
    digest = hashlib.sha256(msgspec.json.encode([parent_run_id, args.agent_id, args.task,
                                                 args.max_tokens])).digest()
    bits = int.from_bytes(digest[:10], "big")
    tail = "".join(_CROCKFORD[(bits >> (5 * i)) & 31] for i in reversed(range(16)))
    return parent_run_id[:10] + tail


def delegate_tool(engine: Engine, agents: AgentRegistry, gate: PolicyGate) -> ToolSpec[DelegateArgs]:
    """The ``agent.delegate`` tool over this engine, agent registry and policy gate."""
    # One parent's calls may overlap (an approval decided while another call
    # waits): the fan-out count and the child's start are one step per parent.
    locks = KeyedLocks()

    async def handler(args: DelegateArgs, ctx: ToolContext) -> ToolOutput:
        parent = engine.get_run(_SYSTEM, ctx.run_id)
        child_id = child_run_id(parent.run_id, args)
        async with locks.hold(parent.run_id):
            if engine.store.get_entity("runs", child_id) is None:
                await _start_child(engine, agents, gate, parent, child_id, args)
        child = await _wait(engine, parent.run_id, child_id)
        if child.state != RunStateId.DONE:
            raise PalyraError(f"child run {child_id} ended {child.state}: "
                              f"{child.error_message or child.end_reason}",
                              code=ErrorCode.TOOL_FAILED, details={"child_run_id": child_id})
        return ToolOutput({"child_run_id": child_id, "text": child.final_text,
                           "tokens": child.usage.tokens},
                          facts={"child_run_id": child_id, "agent_id": args.agent_id})

    return ToolSpec(
        name=TOOL_NAME,
        description=("Hand a task to another agent: it runs as a child run and its final "
                     "answer is the result. Arguments: agent_id, task, optional max_tokens."),
        args_type=DelegateArgs,
        handler=handler,
        # Sensitive: a child run spends the principal's budget and reaches another
        # agent's tools under that agent's postures, so by default each call asks
        # (an operator may set the posture to always_allow). Idempotent: a call a
        # restart left in flight finds its child again (see the module docstring).
        capabilities=frozenset({Capability.DELEGATE}),
        idempotent=True,
        timeout_s=3600.0,
    )


async def _start_child(engine: Engine, agents: AgentRegistry, gate: PolicyGate,
                       parent: RunRecord, child_id: str, args: DelegateArgs) -> None:
    config = engine.config
    depth = parent.delegation_depth + 1
    if depth > config.delegation_max_depth:
        raise PalyraError(f"delegation depth {depth} is over the limit of "
                          f"{config.delegation_max_depth}", code=ErrorCode.INVALID_ARGUMENT)
    if len(engine.child_runs(parent.run_id)) >= config.delegation_max_children:
        raise PalyraError(f"run {parent.run_id} already delegated to "
                          f"{config.delegation_max_children} child runs",
                          code=ErrorCode.RESOURCE_EXHAUSTED)
    agent = agents.require(args.agent_id)
    verdict = gate.check_delegate(parent.identity.principal, agent.agent_id,
                                  run_id=parent.run_id, parent_agent_id=parent.agent_id,
                                  depth=depth)
    if not verdict.allowed:
        raise PalyraError(verdict.reason, code=ErrorCode.PERMISSION_DENIED)
    budget = args.max_tokens
    if parent.token_budget:
        left = max(0, parent.token_budget - parent.usage.tokens)
        budget = min(budget, left) if budget else left
        if budget <= 0:
            raise PalyraError("the run's token budget leaves nothing to delegate",
                              code=ErrorCode.BUDGET_EXHAUSTED)
    with contextlib.suppress(PalyraError):
        await engine.start_run(parent.identity, StartRun(
            Selectors(session_key=f"delegation:{child_id}"), text=args.task, run_id=child_id,
            driver="delegate", complete=True, agent_id=agent.agent_id,
            agent_postures=postures_for(agent, engine.tool_names()),
            model_route=route_for(agent), response_cache=agent.response_cache,
            parent_run_id=parent.run_id, delegation_depth=depth, token_budget=budget,
            writes=(engine.child_index_write(parent.run_id, child_id),)))


async def _wait(engine: Engine, parent_run_id: str, child_id: str) -> RunRecord:
    try:
        while True:
            record = await engine.wait_run(_SYSTEM, child_id, until_terminal=True)
            if record.state in (RunStateId.DONE, RunStateId.FAILED, RunStateId.CANCELLED):
                return record
            await asyncio.sleep(0.05)  # parked: not recovered yet
    except asyncio.CancelledError:
        # A parent that ends (cancelled, failed) ends its child in its own ending
        # append (the engine's cascade), and a drain leaves both parked for the next
        # start. Only a call stopped while its run goes on (the tool's timeout)
        # leaves the child behind: that one is cancelled here, on its own.
        if not engine.draining and not engine.run_ending(parent_run_id):
            with contextlib.suppress(PalyraError):
                await engine.abort_run(_SYSTEM, child_id, "parent cancelled")
        raise
