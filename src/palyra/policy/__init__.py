"""Cedar policy gate for tool calls and approval decisions.

``PolicyGate.load(PolicyConfig(config_dir=...))`` at start-up (bad policies
fail with ``POLICY_INVALID`` naming file and line); then per proposed call::

    posture = gate.resolve_posture(name, caps, session_overrides)
    decision = gate.check_tool(request, posture=posture, budget_left=n, approved=a)

``decision.outcome`` is ``allow``, ``deny`` or ``needs_approval``, and every
decision carries the ``policy_hash`` of the active policy set for the journal.
"""

from palyra.policy._config import DEFAULT_RUN_TOOL_BUDGET, PolicyConfig
from palyra.policy._decide import decide, default_posture, resolve_posture
from palyra.policy._gate import PolicyGate
from palyra.policy._loader import (
    LoadedPolicies,
    PolicySource,
    load_policies,
    policy_hash,
)
from palyra.policy._model import Decision, EngineResult, Outcome, Posture, ToolRequest

__all__ = [
    "DEFAULT_RUN_TOOL_BUDGET",
    "Decision",
    "EngineResult",
    "LoadedPolicies",
    "Outcome",
    "PolicyConfig",
    "PolicyGate",
    "PolicySource",
    "Posture",
    "ToolRequest",
    "decide",
    "default_posture",
    "load_policies",
    "policy_hash",
    "resolve_posture",
]
