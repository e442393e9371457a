"""Build the application object graph from the configuration.

journal → policy gate → tools → provider → engine → ``engine.recover()`` →
the ``PalyraApp`` facade the transports call. Every resource is entered on
the caller's exit stack, so the daemon closes them in reverse order: the
engine parks its runs before the journal closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import importlib.metadata
import os
from collections.abc import Callable
from pathlib import Path

import structlog

from palyra.adapters import (
    AgentPrompt,
    ContextReferences,
    GatePolicy,
    InputAssembly,
    MemoryContext,
    Preferences,
    RecentConversation,
    RegistryTools,
)
from palyra.adapters.delegation import TOOL_NAME, delegate_tool
from palyra.adapters.scheduled import prompt_handler
from palyra.agents import AgentRegistry
from palyra.app import CallContext, PalyraApp
from palyra.channels import (
    COMMAND_TASK,
    DISPATCH_TASK,
    PAIRING_SUBJECT,
    SEND_CONCURRENCY,
    SEND_TASK,
    ChannelRouter,
    Outbox,
    PairingBook,
)
from palyra.channels.adapters import build_sinks, reply_caps
from palyra.channels.adapters.telegram import BotApi
from palyra.channels.ingress import TELEGRAM_PREFIX, Ingress
from palyra.channels.polling import poll_telegram
from palyra.config import PalyraConfig
from palyra.core.errors import PalyraError
from palyra.daemon.policy_reload import reload_policy
from palyra.daemon.run_ends import RunEndFollower
from palyra.daemon.singletons import Singletons
from palyra.daemon.singletons import stop as stop_singleton
from palyra.daemon.skills import SkillsHost
from palyra.engine import (
    Engine,
    IdentityRec,
    RecoveryReport,
    RunRecord,
    RunStateId,
    daemon_owner_name,
    session_leases,
)
from palyra.journal import JournalStore, sign_head_if_moved
from palyra.learning import TASK_KIND as REFLECTION_TASK
from palyra.learning import Learning
from palyra.memory.factory import build_embedder
from palyra.memory.service import Memory
from palyra.ops.doctor import daemon_details
from palyra.ops.readiness import Readiness
from palyra.policy import PolicyGate
from palyra.providers import ProviderRegistry
from palyra.schedules import PROMPT_TASK, Schedules
from palyra.tasks import TaskQueue, TaskWorker
from palyra.tools import default_registry
from palyra.transport.context import ContextFactory
from palyra.usage import UsageLedger
from palyra.watchdog import Watchdog

try:
    VERSION = importlib.metadata.version("palyra")
except importlib.metadata.PackageNotFoundError:  # running from a source tree
    VERSION = "0.0.0"

WORKSPACE_DIR = "workspace"
SKILLS_DIR = "skills"

_log = structlog.get_logger("palyra.daemon")


async def open_application(
    config: PalyraConfig, stack: contextlib.AsyncExitStack,
    on_phase: Callable[[str], None] = lambda phase: None,
) -> tuple[PalyraApp, ContextFactory[CallContext]]:
    """Open every port and the facade; return the app and its context factory.

    ``on_phase`` is told each step of start-up as it begins (``/readyz`` names it).

    Raises:
        PalyraError: ``DATA_DIR_LOCKED`` (another daemon owns the data dir),
            ``POLICY_INVALID``, ``CONFIG_INVALID``.
    """
    on_phase("opening the journal")
    store = JournalStore.open(config.data_dir, config=config.journal)
    stack.callback(store.close)
    # Runs after the engine has parked its runs (exit order is LIFO), so the
    # last signed head covers every event this daemon wrote.
    stack.push_async_callback(sign_head_if_moved, store)
    gate = PolicyGate.load(config.policy)
    registry = default_registry(config.tools)
    skills_dir = Path(config.tools.skills_dir) if config.tools.skills_dir else \
        config.data_dir / SKILLS_DIR
    skills = SkillsHost(config.tools, skills_dir, registry, store)
    await skills.start()
    if config.tools.mcp:
        on_phase("connecting MCP servers")
        # The SDK is loaded only when servers are configured. Entered before the
        # engine, left after it has parked its runs: no call loses its server.
        from palyra.tools.mcp.hub import McpHub

        await stack.enter_async_context(McpHub(registry, config.tools.mcp))
    workspace = config.data_dir / WORKSPACE_DIR
    os.makedirs(workspace, mode=0o700, exist_ok=True)
    models = ProviderRegistry.build(config.provider, config.providers)
    stack.push_async_callback(models.aclose)
    provider = models.default
    memory = Memory(store, build_embedder(config.memory, os.environ))
    memory.start()  # a remote embedder's vectors are filled in by a background loop
    stack.push_async_callback(memory.aclose)
    _log.info("memory embedder", space=memory.status().space,
              remote=memory.status().remote)
    if config.memory.embedder == "wordllama" and "wordllama" not in memory.status().space:
        # Never a silent fallback: search quality drops to hashed bags of words.
        _log.warning("embedder_fallback", configured="wordllama", loaded=memory.status().space,
                     fix="install the wordllama package, or set [memory] embedder = \"hash\"")
    policy, tools = GatePolicy(gate, registry), RegistryTools(registry, workspace)
    engine = Engine(store, provider, policy, tools, config.engine, models=models,
                    usage=UsageLedger(store, config.usage),
                    context=InputAssembly([AgentPrompt(AgentRegistry(store)),
                                           RecentConversation(store),
                                           ContextReferences(policy, tools, memory, gate),
                                           MemoryContext(memory, gate,
                                                         skip_kinds=("preference",)),
                                           Preferences(memory, gate)]),
                    # Several daemons on one PostgreSQL journal: each owns sessions by lease.
                    leases=session_leases(store, daemon_owner_name(), config.journal.lease_ttl_s))
    if TOOL_NAME not in config.tools.disabled:
        # Registered before recovery: a parent parked on a delegation re-runs the call.
        registry.register(delegate_tool(engine, AgentRegistry(store), gate))
    # Entering starts the engine's TaskGroup; leaving it drains (parks runs).
    await stack.enter_async_context(engine)
    on_phase("recovering runs")
    report = await engine.recover()
    _log.info("recovered", **recovery_log_fields(report))
    on_phase("recovering tasks")
    tasks = TaskQueue(store)
    moved = await tasks.start()
    stack.push_async_callback(tasks.close)
    orphans = await cancel_orphaned_tasks(engine, tasks)
    _log.info("tasks recovered", moved=len(moved), orphans_cancelled=len(orphans))

    learning = Learning(store, provider, config.learning, models=engine.models)
    worker = TaskWorker(tasks, {REFLECTION_TASK: learning.reflect})
    worker.start()
    stack.push_async_callback(worker.close)

    async def on_run_end(record: RunRecord) -> None:
        await learning.on_run_end(record, tasks)

    engine.on_run_end(on_run_end)
    # A run ending failed or cancelled cancels its tasks (in the same commit, or on a
    # shared journal each by its own compare-and-set right after it).
    engine.on_run_terminal(lambda record, event: tasks.cancelling_children(
        record.run_id, f"parent run {record.run_id} ended ({event})"))
    stack.callback(RunEndFollower(store, engine, tasks).close)  # other daemons' run ends
    watchdog = Watchdog(engine, tasks, config.watchdog)
    watchdog.start()
    stack.push_async_callback(watchdog.close)
    schedules = Schedules(store, tasks)
    prompts = TaskWorker(tasks, {PROMPT_TASK: prompt_handler(engine, AgentRegistry(store),
                                                             schedules, tasks)}, concurrency=4)
    prompts.start()
    stack.push_async_callback(prompts.close)
    # On a shared journal each singleton runs on the one daemon holding its lease.
    singletons = Singletons(store, config.journal.lease_ttl_s)
    # Missed firings fire at once.
    firing = asyncio.ensure_future(singletons.run("schedules", schedules.run))
    stack.push_async_callback(stop_singleton, firing)
    app = PalyraApp(engine)
    app.schedules = schedules
    on_phase("opening channels")
    app.channels, app.ingress = await _open_channels(config, store, engine, tasks, gate, stack,
                                                     singletons)
    app.tasks = tasks
    app.learning = learning
    app.memory = memory
    app.skills = skills
    readiness = Readiness(store, gate)
    readiness.recovered = True  # engine.recover() and the task queue's start returned
    app.readiness = lambda: [(c.name, c.ok, c.detail) for c in readiness.checks()]
    app.reload_policy = lambda: reload_policy(gate, store)
    app.health_details = lambda: [
        (c.name, c.ok, c.detail) for c in daemon_details(
            config.data_dir, config.memory.embedder, lambda: memory.status().space)]
    return app, CallContext.from_caller


async def _open_channels(config: PalyraConfig, store: JournalStore, engine: Engine,
                         tasks: TaskQueue, gate: PolicyGate, stack: contextlib.AsyncExitStack,
                         singletons: Singletons) -> tuple[ChannelRouter, Ingress]:
    """The channel router, pairing (deciding ``dm_pairing:`` approvals), the outbox and
    their workers: dispatches run up to 16 at once (per-channel slots inside)."""
    channels = config.channels
    pairing = PairingBook(store, policy_hash=lambda: gate.policy_hash,
                          grant_ttl_s=channels.pairing_grant_ttl_s,
                          code_ttl_s=channels.pairing_code_ttl_s)
    sinks = build_sinks(channels)
    for sink in sinks.values():
        stack.push_async_callback(sink.aclose)
    router = ChannelRouter(store, engine, tasks, pairing, gate, channels,
                           reply_caps=reply_caps(sinks))
    engine.on_subject_approval(PAIRING_SUBJECT, router.decide_pairing)
    outbox = Outbox(dict(sinks), tasks)
    sender = TaskWorker(tasks, {SEND_TASK: outbox.handle}, concurrency=SEND_CONCURRENCY,
                        lease_ms=outbox.lease_ms)
    # A dispatch's replies go straight to the outbox's worker, claimed in the commit of
    # the dispatch's success (no claim commit of their own); any it cannot take queue.
    # Likewise a message's dispatch, claimed in its admission's commit.
    dispatcher = TaskWorker(tasks, {DISPATCH_TASK: router.dispatch}, concurrency=16,
                            hand_to={SEND_TASK: sender}, staging={DISPATCH_TASK})
    router.hand_dispatches_to(dispatcher)
    for worker in (sender, dispatcher,
                   TaskWorker(tasks, {COMMAND_TASK: router.dispatch}, concurrency=2,
                              hand_to={SEND_TASK: sender}, staging={COMMAND_TASK})):
        worker.start()
        stack.push_async_callback(worker.close)
    sweeper = asyncio.ensure_future(router.sweep_every())
    stack.callback(sweeper.cancel)
    ingress = Ingress(router, channels, config.data_dir)
    for name, bot in channels.telegram.items():
        if bot.mode == "polling" and channels.enabled:
            api = BotApi(bot.api_base_url, bot.bot_token)
            stack.push_async_callback(api.aclose)
            poller = asyncio.ensure_future(singletons.run(
                f"channel:{TELEGRAM_PREFIX}{name}",
                functools.partial(poll_telegram, name, bot, api, ingress, store)))
            stack.push_async_callback(stop_singleton, poller)
    for name, app in channels.discord.items():
        if channels.enabled and app.bot_token:  # without one: slash commands over HTTP only
            # The websockets client (its modules) loads only for a Discord gateway.
            from palyra.channels.gateway import Gateway

            gateway = asyncio.ensure_future(singletons.run(
                f"channel:discord:{name}", Gateway(name, app, ingress, store).run))
            stack.push_async_callback(stop_singleton, gateway)
    return router, ingress


async def cancel_orphaned_tasks(engine: Engine, tasks: TaskQueue) -> list[str]:
    """Cancel unfinished tasks whose parent run ended cancelled or failed.

    A run's end cancels its children in the commits right after its own (the
    run-end hook); if the daemon died in between, this sweep at start-up
    finishes the job, so no child of a dead run is ever left queued.
    """
    system = IdentityRec("system:tasks")
    done: list[str] = []
    for task in tasks.unfinished():
        if not task.parent_run_id:
            continue
        try:
            parent = engine.get_run(system, task.parent_run_id)
        except PalyraError:
            continue  # an unknown parent: nothing says the task should stop
        if parent.state in (RunStateId.CANCELLED, RunStateId.FAILED):
            await tasks.cancel(task.task_id, f"parent run {parent.state}")
            done.append(task.task_id)
    return done


def recovery_log_fields(report: RecoveryReport) -> dict[str, object]:
    """Structured log fields of a recovery report: per category a count and the run ids.

    ``RecoveryReport(resumed=[a], waiting=[], ...)`` → ``{"resumed": 1,
    "resumed_runs": ["a"], "waiting": 0, "waiting_runs": [], ..., "total": 1}``.
    Generic over the report's dataclass fields, so a new category is logged too.
    """
    fields: dict[str, object] = {}
    total = 0
    for f in dataclasses.fields(report):
        value = getattr(report, f.name)
        if isinstance(value, list | tuple | set | frozenset):
            ids = sorted(str(v) for v in value)
            fields[f.name] = len(ids)
            fields[f"{f.name}_runs"] = ids
            total += len(ids)
        else:
            fields[f.name] = value
    fields["total"] = total
    return fields
