"""Adapters that bind the engine's ports to the real packages (used by the composition root).

The engine codes against ``PolicyPort``, ``ToolsPort`` and ``ContextPort`` and imports
neither ``policy`` nor ``tools`` nor ``memory``; these classes are the only places that
know both sides. ``daemon``'s wiring builds them; tests and benchmarks may too.
"""

from palyra.adapters.context import (
    AgentPrompt,
    ContextReferences,
    InputAssembly,
    MemoryContext,
    Preferences,
    RecentConversation,
)
from palyra.adapters.policy import GatePolicy
from palyra.adapters.tools import RegistryTools

__all__ = ["AgentPrompt", "ContextReferences", "GatePolicy", "InputAssembly", "MemoryContext", "Preferences", "RecentConversation", "RegistryTools"]
