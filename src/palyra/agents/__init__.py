"""The agents registry: agents (system prompt, provider selection, tool postures) and
bindings from channels, conversations and session keys to agents.

:mod:`~palyra.agents.model` is pure (records, validation, which binding wins);
:mod:`~palyra.agents.registry` keeps them in the journal's ``agents`` table.
"""

from palyra.agents.model import AgentRecord, BindingRecord, bound_agent
from palyra.agents.registry import AgentRegistry

__all__ = ["AgentRecord", "AgentRegistry", "BindingRecord", "bound_agent"]
