"""A whole app over a real journal and the scripted ``add`` model (tests that drive RunStream)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from palyra.adapters import GatePolicy, RegistryTools
from palyra.app import CallContext, PalyraApp
from palyra.engine import Engine, EngineConfig
from palyra.journal import JournalStore
from palyra.policy import PolicyConfig, PolicyGate
from palyra.providers import ScriptedProvider
from palyra.tools import default_registry


@contextlib.asynccontextmanager
async def scripted_app(data_dir: Path) -> AsyncIterator[tuple[PalyraApp, JournalStore]]:
    """The app and its store: default policy, built-in tools, the scripted ``add`` model."""
    store = JournalStore.open(data_dir)
    try:
        registry = default_registry()
        engine = Engine(store, ScriptedProvider(tool="add"),
                        GatePolicy(PolicyGate.load(PolicyConfig()), registry),
                        RegistryTools(registry, data_dir), EngineConfig(max_turns=8))
        async with engine:
            await engine.recover()
            yield PalyraApp(engine), store
    finally:
        store.close()


STREAM_USER = CallContext.for_principal("user:stream", "01J00000000000000000000000")
"""The caller the RunStream tests stream as."""


def tool_loop_text(steps: int) -> str:
    """A user message the scripted model answers with ``steps`` ``add`` calls, then ``result=``."""
    return (f"Start from 0 and add 1 to the running total {steps} times, one `add` tool call "
            "per step, then reply with the final result.")
