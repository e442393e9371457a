"""A real engine on a temp data dir: LMDB journal, Cedar gate, registry tools.

``Harness`` can be stopped and started again on the same data dir (a
restart), which is how the recovery tests exercise the journal for real.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import msgspec
from palyra_gen.palyra import v1 as pb

from palyra.adapters import GatePolicy, RegistryTools
from palyra.adapters.delegation import delegate_tool
from palyra.agents import AgentRegistry
from palyra.app import CallContext, PalyraApp
from palyra.engine import (
    Engine,
    EngineConfig,
    daemon_owner_name,
    member_from,
    run_next,
    session_leases,
)
from palyra.journal import JournalConfig, JournalStore, StoredEvent
from palyra.policy import PolicyConfig, PolicyGate
from palyra.providers import ModelProvider, ProviderRegistry, ScriptedProvider
from palyra.tools import (
    ADD,
    Capability,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    ToolsConfig,
    ToolSpec,
    default_registry,
)
from palyra.tools.mcp import McpServerConfig
from palyra.tools.mcp.hub import McpHub
from palyra.tools.skills import Limits, register_skills
from palyra.usage import UsageConfig, UsageLedger

DEVICE = "01J00000000000000000000000"
USER = CallContext.for_principal("user:alice", DEVICE)
OTHER_USER = CallContext.for_principal("user:mallory", DEVICE)
ADMIN = CallContext.for_principal("admin:ops", DEVICE)


def loop_text(k: int) -> str:
    """The tool-loop workload's user message."""
    return (f"Start from 0 and add 1 to the running total {k} times, one `add` tool call per "
            "step, then reply with the final result.")


class SlowAddArgs(msgspec.Struct, frozen=True):
    a: int | float
    b: int | float


def slow_add(seconds: float, capabilities: Iterable[str] = (Capability.READ_ONLY,)) -> ToolSpec[Any]:
    """An ``add`` that sleeps first (for cancellation and drain tests)."""

    async def handler(args: SlowAddArgs, ctx: ToolContext) -> ToolOutput:
        await asyncio.sleep(seconds)
        return ToolOutput({"result": args.a + args.b})

    return ToolSpec("add", "Add slowly.", SlowAddArgs,
                    frozenset(Capability(c) for c in capabilities), handler, timeout_s=60.0)


@dataclass
class Harness:
    """Builds, restarts and closes the engine graph on one data dir."""

    data_dir: Path
    config: EngineConfig = field(default_factory=lambda: EngineConfig(approval_timeout_s=30))
    policy_config: PolicyConfig = field(default_factory=PolicyConfig)
    provider_factory: Callable[[], ModelProvider] = ScriptedProvider
    # Named providers for agents' routes (None: the one provider serves every run).
    models_factory: Callable[[], ProviderRegistry] | None = None
    usage: UsageConfig = field(default_factory=UsageConfig)  # prices and budgets
    delegation: bool = False  # register agent.delegate (as the daemon does)
    tool: ToolSpec[Any] = ADD
    extra_tools: tuple[ToolSpec[Any], ...] = ()  # registered next to the built-ins
    mcp: tuple[McpServerConfig, ...] = ()  # MCP servers whose tools join the registry
    tools_config: ToolsConfig = field(default_factory=ToolsConfig)
    skills_dir: Path | None = None  # installed skills whose tools join the registry
    skill_limits: Limits = field(default_factory=Limits)
    now_ms: Callable[[], int] | None = None
    # Builds the engine's ContextPort from the open store and gate (None: the tape only).
    context_factory: Callable[[JournalStore, PolicyGate], Any] | None = None
    # The journal's backend (None: LMDB in the data dir); on PostgreSQL the engine
    # owns sessions by lease, as a daemon does.
    journal_config: JournalConfig | None = None
    store: JournalStore | None = None
    engine: Engine | None = None
    app: PalyraApp | None = None
    registry: ToolRegistry | None = None
    hub: McpHub | None = None
    _stack: contextlib.AsyncExitStack | None = None

    async def start(self, *, recover: bool = True) -> PalyraApp:
        self.store = JournalStore.open(self.data_dir, config=self.journal_config)
        registry = default_registry(self.tools_config)
        registry.replace(self.tool)  # a test may swap the built-in add for a slow one
        for extra in self.extra_tools:
            registry.register(extra)
        self.registry = registry
        if self.skills_dir is not None:
            register_skills(self.skills_dir, registry, limits=self.skill_limits)
        self._stack = contextlib.AsyncExitStack()
        if self.mcp:
            self.hub = await self._stack.enter_async_context(McpHub(registry, self.mcp))
        gate = PolicyGate.load(self.policy_config)
        kwargs: dict[str, Any] = {"now_ms": self.now_ms} if self.now_ms else {}
        if self.context_factory is not None:
            kwargs["context"] = self.context_factory(self.store, gate)
        provider = self.provider_factory()
        kwargs["usage"] = UsageLedger(self.store, self.usage)
        if self.journal_config is not None:
            kwargs["leases"] = session_leases(self.store, daemon_owner_name(),
                                              self.journal_config.lease_ttl_s)
        if self.models_factory is not None:
            kwargs["models"] = models = self.models_factory()
            provider = models.default
            self._stack.push_async_callback(models.aclose)
        self.engine = Engine(self.store, provider, GatePolicy(gate, registry),
                             RegistryTools(registry, self.data_dir), self.config, **kwargs)
        if self.delegation:
            registry.register(delegate_tool(self.engine, AgentRegistry(self.store), gate))
        await self._stack.enter_async_context(self.engine)
        if recover:
            await self.engine.recover()
        self.app = PalyraApp(self.engine)
        return self.app

    async def stop(self) -> None:
        """Drain (park) every run and close the journal, like SIGTERM."""
        assert self._stack is not None and self.store is not None
        await self._stack.aclose()
        self.store.close()
        self._stack = None  # stopped: the fixture does not stop it again

    async def restart(self, **changes: Any) -> PalyraApp:
        await self.stop()
        for key, value in changes.items():
            setattr(self, key, value)
        return await self.start()

    # -- inspection ----------------------------------------------------------
    def tape(self, run_id: str) -> list[StoredEvent]:
        assert self.store is not None
        return self.store.read_tape(run_id, -1, 1000).events

    def members(self, run_id: str) -> list[Any]:
        return [member_from(e.kind, e.payload) for e in self.tape(run_id)]

    def normalized_tape(self, run_id: str) -> list[dict[str, Any]]:
        """The tape as golden files hold it: ``{kind, payload}`` with run-specific
        values removed (see :func:`normalize_payload`)."""
        return [{"kind": e.kind.removeprefix("tape."), "payload": normalize_payload(e.payload)}
                for e in self.tape(run_id)]

    def kinds(self, run_id: str) -> list[str]:
        """Compact tape description: ``status:DONE``, ``agent_loop:STARTED``, ``tool_result``."""
        out = []
        for e in self.tape(run_id):
            member = member_from(e.kind, e.payload)
            name = e.kind.removeprefix("tape.")
            if isinstance(member, pb.RunStatus):
                name += ":" + member.state.name
            elif isinstance(member, pb.AgentLoop):
                name += ":" + member.phase.name
            out.append(name)
        return out

    def check_tape(self, run_id: str) -> list[str]:
        """Assert the tape invariants; return the run's state sequence."""
        events = self.tape(run_id)
        assert [e.tape_seq for e in events] == list(range(len(events))), "tape not dense"
        assert len({e.event_id for e in events}) == len(events), "duplicated event"
        state, states = "pending", []
        for i, e in enumerate(events):
            member = member_from(e.kind, e.payload)
            if isinstance(member, pb.RunStatus):
                assert state not in ("done", "failed", "cancelled"), "event after terminal"
                state = run_next(state, member.event)
                assert member.state.name.lower() == state
                states.append(state)
            else:
                assert state not in ("done", "failed", "cancelled") or i == len(events), (
                    "event after terminal status")
        return states


_ULID_RE = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b")
# Keys whose values differ on every run: ids, clocks, hashes and digests.
_VOLATILE_KEY = re.compile(r"(Id|Hash|Digest|Sha256|UnixMs|AtMs)$")


def normalize_payload(value: Any) -> Any:
    """A tape payload without ids, timestamps and hashes; ULIDs inside text
    become ``<ulid>``. Kinds, states, texts, reasons and turns stay."""
    if isinstance(value, dict):
        return {k: normalize_payload(v) for k, v in sorted(value.items())
                if not _VOLATILE_KEY.search(k)}
    if isinstance(value, list):
        return [normalize_payload(v) for v in value]
    if isinstance(value, str):
        return _ULID_RE.sub("<ulid>", value)
    return value


def fast_config(**changes: Any) -> EngineConfig:
    return replace(EngineConfig(approval_timeout_s=30), **changes)


async def run_to_end(app: PalyraApp, text: str, ctx: CallContext = USER,
                     **fields: Any) -> pb.Run:
    """CreateRun(complete, wait) and then wait for the terminal state."""
    created = await app.create_run(ctx, pb.CreateRunRequest(
        input=pb.MessageInput(text=text), complete=True, wait=True, **fields))
    done = await app.complete_run(ctx, pb.CompleteRunRequest(run_id=created.run.run_id,
                                                             wait=True))
    return done.run


async def next_approval(app: PalyraApp, run_id: str) -> pb.Approval:
    """Wait (up to 5 s) until ``run_id`` waits for an approval and return it."""
    async with asyncio.timeout(5.0):
        while True:
            run = (await app.get_run(USER, pb.GetRunRequest(run_id=run_id))).run
            if run.state == pb.RunState.WAITING_FOR_APPROVAL and run.pending_approval_id:
                got = await app.get_approval(ADMIN, pb.GetApprovalRequest(
                    approval_id=run.pending_approval_id))
                return got.approval
            if run.state in (pb.RunState.DONE, pb.RunState.FAILED, pb.RunState.CANCELLED):
                raise AssertionError(f"run ended {run.state.name} without asking")
            await asyncio.sleep(0.005)
