"""The in-process driver: the whole engine graph in the harness's own process, no transport."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from palyra_gen.palyra import v1 as pb

from bench.workload import OnEvent, StreamedTurn
from palyra.adapters import GatePolicy, RegistryTools
from palyra.app import CallContext, PalyraApp
from palyra.core.errors import PalyraError
from palyra.engine import Engine, EngineConfig
from palyra.journal import JournalStore
from palyra.policy import PolicyConfig, PolicyGate
from palyra.providers import ScriptedProvider
from palyra.tools import default_registry

DEVICE = "01J00000000000000000000000"
MCP_SERVER = Path(__file__).with_name("mcp_add_server.py")
# --tool: the registry name of the tool the scripted model calls.
TOOL_NAMES = {"mcp": "mcp.bench.add", "skill": "skill.demo.add"}
EXAMPLE_SKILL = Path(__file__).resolve().parents[1] / "examples" / "skills" / "add"
CLIENT = CallContext.for_principal("user:bench", DEVICE)
APPROVER = CallContext.for_principal("admin:bench", DEVICE)


class InProcessDriver:
    """Drives a ``PalyraApp`` in this process."""

    def __init__(self, app: PalyraApp, store: JournalStore, tool: str, batch: bool = True,
                 shape: str = "stream") -> None:
        self._app = app
        self.store = store
        self._tool = tool
        self._batch = batch
        self._shape = shape
        self._turns: dict[str, StreamedTurn] = {}

    async def prepare_session(self, session_key: str, *, hitl: bool) -> None:
        if not hitl:
            return  # the turn's CreateRun creates the session in its accept commit
        resolved = await self._app.resolve_session(
            CLIENT, pb.ResolveSessionRequest(session_key=session_key))
        assert resolved.session is not None
        await self._app.set_tool_posture(CLIENT, pb.SetToolPostureRequest(
            session_id=resolved.session.session_id, tool_name=self._tool,
            posture=pb.ToolPosture.ASK_EACH_TIME))

    async def start_turn(self, session_key: str, text: str) -> str:
        if self._shape == "stream":
            # The same calls as the gRPC driver makes (bench/transports.py), minus the wire.
            turn = StreamedTurn(self._app.run_stream(CLIENT, _one(pb.RunStreamRequest(
                v=1, session_key=session_key, input=pb.MessageInput(text=text),
                batch=self._batch, complete=True))))
            run_id = await turn.start()
            self._turns[run_id] = turn
            return run_id
        created = await self._app.create_run(CLIENT, pb.CreateRunRequest(
            v=1, session_key=session_key, input=pb.MessageInput(text=text), complete=True))
        assert created.run is not None
        return created.run.run_id

    async def wait(self, run_id: str, on_event: OnEvent) -> pb.Run:
        if self._shape == "stream":
            try:
                return await self._turns.pop(run_id).follow(on_event)
            except PalyraError as exc:  # a failed run ends its stream with its error
                return pb.Run(run_id=run_id, state=pb.RunState.FAILED,
                              final_text=f"{exc.code.value}: {exc}")
        async for response in self._app.watch_run(
                CLIENT, pb.WatchRunRequest(run_id=run_id, after_seq=-1, batch=self._batch)):
            for event in response.events if self._batch else [response.event]:
                if event is not None:
                    await on_event(event)
        got = await self._app.get_run(CLIENT, pb.GetRunRequest(run_id=run_id))
        return got.run or pb.Run()

    async def decide_approval(self, approval_id: str) -> None:
        await self._app.decide_approval(APPROVER, pb.DecideApprovalRequest(
            approval_id=approval_id, decision=pb.ApprovalDecision.APPROVE,
            scope=pb.ApprovalScope.ONCE, reason="bench"))

    @property
    def app(self) -> PalyraApp:
        """The app the driver calls (the ``--ops`` modes read its engine)."""
        return self._app

    def storage_effective(self) -> dict[str, Any]:
        """The store's durability settings as LMDB reports them."""
        if self.store.env.durable is None:  # PostgreSQL: durable when its COMMIT returns
            return {"engine": "postgres", "synchronous_commit": True, "group_commit": True}
        flags = self.store.env.env.flags()
        return {"engine": "lmdb", "sync": bool(flags.get("sync")),
                "metasync": bool(flags.get("metasync")),
                "map_size": self.store.stats().map_size, "group_commit": True}


async def _one(request: pb.RunStreamRequest) -> AsyncIterator[pb.RunStreamRequest]:
    """A request stream of one message, then the half-close (as grpclib sends a list)."""
    yield request


@contextlib.asynccontextmanager
async def in_process(data_dir: Path, args: argparse.Namespace) -> AsyncIterator[InProcessDriver]:
    """Open the whole engine graph on ``data_dir`` and yield a driver for it."""
    # ``--backend postgres`` hands a PostgreSQL journal config in (bench/tool_loop.py).
    store = JournalStore.open(data_dir, config=getattr(args, "journal_config", None))
    try:
        registry = default_registry()
        tool = TOOL_NAMES.get(args.tool, args.tool)
        config = EngineConfig(max_turns=args.steps + 2, approval_timeout_s=300.0)
        async with contextlib.AsyncExitStack() as stack:
            # MCP and skills are imported only when used: their modules (pydantic,
            # anyio, wasmtime) would otherwise grow the heap every other run collects.
            if args.tool == "mcp":
                from palyra.tools.mcp import McpServerConfig
                from palyra.tools.mcp.hub import McpHub

                # The same add, served over stdio by a real MCP server (a child process).
                await stack.enter_async_context(McpHub(registry, [McpServerConfig(
                    name="bench", command=sys.executable, args=(str(MCP_SERVER),),
                    capabilities=("read_only",))]))
            if args.tool == "skill":
                from palyra.tools.skills import Limits, install, register_skills

                # The same add as a WebAssembly skill (the example skill), under fuel.
                install(EXAMPLE_SKILL, data_dir / "skills")
                register_skills(data_dir / "skills", registry, limits=Limits())
            engine = Engine(store, ScriptedProvider(tool=tool),
                            GatePolicy(PolicyGate.load(PolicyConfig()), registry),
                            RegistryTools(registry, data_dir), config)
            async with engine:
                await engine.recover()
                yield InProcessDriver(PalyraApp(engine), store, tool,
                                      not getattr(args, "unbatched", False),
                                      getattr(args, "rpc", "stream"))
    finally:
        store.close()
